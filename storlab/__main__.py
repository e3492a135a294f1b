from storlab.cli import main

main()
