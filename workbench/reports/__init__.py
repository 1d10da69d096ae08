"""What a reader opens: every page, table and summary the workbench writes for people.

- :mod:`.notebook_report` — ``workbench report``: every notebook headless, an index page first;
  :mod:`.notebooks` runs them (papermill), :mod:`.html` exports them offline (no CDN, MathML
  through :mod:`.mathml`, one plotly.js beside the pages);
- :mod:`.suite` and :mod:`.suite_figures` — a benchmark suite run's report (``notebooks/suite.ipynb``
  on its files); :mod:`.gate` — the CI gate over a run's records;
- :mod:`.sweep`, :mod:`.tune`, :mod:`.why` — the reports of ``workbench sweep``, ``workbench tune``
  and the why-view; :mod:`.scaling` the sweep-scaling comparison (``benchmarks/sweep_scaling.py``);
- :mod:`.render` — ``workbench report --render``: any run folder's pages rebuilt from the files it
  keeps; :mod:`.site` — the committed reports on the documentation site (``make docs``);
- :mod:`.figures` — the plotly figures every view draws (the Explorer's live ones included);
- :mod:`.reader` — headlines, ``summary.md``, tables, and the scrubbing of this machine's paths;
  :mod:`.environment` the environment block; :mod:`.text` the small words they share.

The widgets (``widgets/``) keep only what draws inside a live notebook.
"""
