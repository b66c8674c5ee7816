# Where the suite's CPU goes (tests/cpu_profile.py): `make test` as it is, with each test's CPU
# (its xdist worker's process tree, setup to teardown) and the CPU by kind of process (pytest
# workers, MiniStack, worker subprocesses, pip, node...) sampled from /proc every second.
#   make test-profile    ->  build/profile/tests.jsonl, build/profile/kinds.txt, a by-file summary
.PHONY: test-profile
test-profile:
	rm -rf build/profile && mkdir -p build/profile
	PYTEST_ADDOPTS="-p tests.cpu_profile" SQSJOBS_TEST_CPU=$(CURDIR)/build/profile/tests.jsonl \
	  $(MAKE) --no-print-directory test & pid=$$!; \
	  $(PY) -m tests.cpu_profile sample build/profile/kinds.txt $$pid; \
	  wait $$pid; status=$$?; \
	  $(PY) -m tests.cpu_profile report build/profile/tests.jsonl; exit $$status
