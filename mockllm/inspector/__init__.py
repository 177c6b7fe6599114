"""See what happened: the inspector's views of scenarios and runs, as HTML (pure: no HTTP).

- `tree`: a scenario's sessions as the tree a person would draw (`mockllm inspect --tree`, the page).
- `view`: one run as lanes of calls, built from the report Structs (`replay/report.py`).
- `markup`: the HTML of those views, escaped, readable with no script.
- `pages`: the live page (`GET /_mockllm/`) and the one-file report
  (`GET /_mockllm/runs/{run}/report.html`), with the CSS and scripts in `assets/` inlined.
"""
