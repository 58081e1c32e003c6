from recrawl.cli import main

main()
