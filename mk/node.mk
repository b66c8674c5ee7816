# clients/node: the Node reference worker of the HTTP worker protocol (issue 43, docs/http-workers.md).
# It has no runtime dependency; npm installs its dev tools (typescript, @types/node: tsc checks the
# JSDoc types) from its lock into clients/node/node_modules, never globally. tests/remote/ runs its
# `node --test` suite and tsc against a served API.
NODE_CLIENT := clients/node

$(NODE_CLIENT)/node_modules/.bin/tsc: $(NODE_CLIENT)/package-lock.json
	npm ci --prefix $(NODE_CLIENT) --no-audit --no-fund --loglevel=error
	touch $@

test: $(NODE_CLIENT)/node_modules/.bin/tsc
