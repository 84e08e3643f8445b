from lakectl.cli import main

raise SystemExit(main())
