from recreate.cli import main

main()
