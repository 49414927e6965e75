from lookahead_lsp.cli import main

raise SystemExit(main())
