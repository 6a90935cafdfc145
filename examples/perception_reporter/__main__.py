from examples.perception_reporter.program import main

main()
