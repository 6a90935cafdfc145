"""An example FastStream subscriber that follows one namespace's placements (README: "Subscribing to placements")."""
