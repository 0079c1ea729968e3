from autoccl.cli import main

main()
