from recrawl.cli.main import main

main()
