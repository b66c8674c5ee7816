# The web dashboard (issue 17, docs/dashboard.md): its browser test needs Debian's Chromium and the
# matching chromedriver. `make test` installs them when missing (CI runs as root on a fresh Debian);
# without root or sudo it says so and the test skips with that reason (it fails instead under CI=true).
CHROMIUM := /usr/bin/chromium
CHROMEDRIVER := /usr/bin/chromedriver
APT_BROWSER := DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver

.PHONY: chromium dashboard-screenshot

$(CHROMIUM) $(CHROMEDRIVER) &:
	@if [ "$$(id -u)" = 0 ]; then apt-get update -qq && $(APT_BROWSER); \
	elif sudo -n true 2>/dev/null; then sudo apt-get update -qq && sudo $(APT_BROWSER); \
	else echo "chromium/chromedriver missing and no root: apt-get install chromium chromium-driver" >&2; fi

chromium: $(CHROMIUM) $(CHROMEDRIVER)

test: $(CHROMIUM) $(CHROMEDRIVER)

# docs/dashboard.png: the overview with a dead job, taken by the browser test (not on every run).
dashboard-screenshot: $(BIN)/sqsjobs $(MS_VENV)/bin/ministack $(CHROMIUM) $(CHROMEDRIVER)
	SQSJOBS_DASHBOARD_SCREENSHOT=$(CURDIR)/docs/dashboard.png SQSJOBS_DASHBOARD_SCREENSHOTS=$(CURDIR)/docs \
	  $(BIN)/pytest -q -p no:cacheprovider tests/dashboard/test_browser.py tests/dashboard/test_*_browser.py \
	  tests/dashboard/test_workflow_pages.py
