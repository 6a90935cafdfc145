from examples.placement_subscriber.subscriber import main

main()
