# imgpipe — set-up, build, demo, tests.
#   make demo   installs what is missing, builds, runs pipelines/samples.json over samples/
#   make test   installs what is missing, builds, runs the test suite
SHELL := /bin/bash
SWIFT ?= swift
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEB_PACKAGES := libvips-dev libvips-tools libsqlite3-dev libcurl4-openssl-dev zlib1g-dev pkg-config fonts-dejavu-core chromium
BIN := .build/debug/imgpipe

.PHONY: deps build release install demo test bench bench-deps clean

# Installs the Debian packages only when something is missing: the libraries (found
# with pkg-config), vipsthumbnail, the DejaVu fonts captions use, and Chromium (the
# contact-sheet test); then Python's jsonschema (the schema test) from PyPI.
deps:
	@if pkg-config --exists vips sqlite3 libcurl zlib && command -v vipsthumbnail >/dev/null \
	    && [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf ] && command -v chromium >/dev/null; then \
	  echo "deps: libvips $$(pkg-config --modversion vips), sqlite $$(pkg-config --modversion sqlite3), curl $$(pkg-config --modversion libcurl), fonts, chromium present"; \
	else \
	  echo "deps: installing $(DEB_PACKAGES)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(DEB_PACKAGES); \
	fi
	@python3 -c 'import jsonschema' 2>/dev/null || python3 -m pip install -q jsonschema \
	  || python3 -m pip install -q --break-system-packages jsonschema

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release

install: release
	$(SUDO) install -m 755 .build/release/imgpipe /usr/local/bin/imgpipe

demo: build
	$(BIN) run pipelines/samples.json --new
	@echo "outputs in out/; previews: $(BIN) dry-run pipelines/samples.json"

test: build
	$(SWIFT) test

clean:
	rm -rf .build out preview .imgpipe

# Benchmarks are not tests: `make test` never runs them.
bench-deps: deps
	@command -v mogrify >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq imagemagick; }
	@command -v curl >/dev/null || { DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq curl; }

bench: bench-deps
	bench/run.sh
