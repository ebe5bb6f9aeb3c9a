# imgpipe — set-up, build, demo, tests.
#   make demo   installs what is missing, builds, runs pipelines/samples.json over samples/
#   make test   installs what is missing, builds, runs the test suite
SHELL := /bin/bash
SWIFT ?= swift
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEB_PACKAGES := libvips-dev libvips-tools libsqlite3-dev libcurl4-openssl-dev pkg-config
BIN := .build/debug/imgpipe

.PHONY: deps build release demo test bench clean

# Installs the Debian packages only when pkg-config cannot find the libraries.
deps:
	@if pkg-config --exists vips sqlite3 libcurl && command -v vipsthumbnail >/dev/null; then \
	  echo "deps: libvips $$(pkg-config --modversion vips), sqlite $$(pkg-config --modversion sqlite3), curl $$(pkg-config --modversion libcurl) present"; \
	else \
	  echo "deps: installing $(DEB_PACKAGES)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(DEB_PACKAGES); \
	fi

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release

demo: build
	$(BIN) run pipelines/samples.json --new
	@echo "outputs in out/; previews: $(BIN) dry-run pipelines/samples.json"

test: build
	$(SWIFT) test

clean:
	rm -rf .build out preview .imgpipe

# Benchmarks are not tests: `make test` never runs them.
bench: deps
	bench/local.sh
