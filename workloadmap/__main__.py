from workloadmap.cli.main import main

main()
