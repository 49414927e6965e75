from lookahead_lsp.commands.cli import main

raise SystemExit(main())
