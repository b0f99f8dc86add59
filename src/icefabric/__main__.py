from icefabric.cli.app import main

main()
