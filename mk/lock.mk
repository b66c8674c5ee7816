# constraints.txt: the lock the image and the Lambda zip build from (docs/deploy.md, "Cold start").
# Resolves sqsjobs[api] in a throw-away virtualenv (pip's dry-run report, nothing installed), ~25 s.
.PHONY: lock
lock:
	rm -rf build/lock && $(PY) -m venv build/lock/venv
	build/lock/venv/bin/pip install -q --no-warn-script-location --dry-run --ignore-installed --report build/lock/report.json '.[api]'
	{ sed -n '/^#/p' constraints.txt; build/lock/venv/bin/python -c 'import json; r = json.load(open("build/lock/report.json")); \
	  found = sorted((i["metadata"]["name"], i["metadata"]["version"]) for i in r["install"]); \
	  print("\n".join(n + "==" + v for n, v in sorted(found, key=lambda f: f[0].lower()) if n != "sqsjobs"))'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
