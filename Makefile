# imgpipe — set-up, build, demo, tests.
#   make demo   installs what is missing, builds, runs pipelines/samples.json over samples/
#   make test   installs what is missing, builds, runs the test suite
#   make fuzz   libFuzzer on the image-input path for FUZZ_SECONDS (default 60); not a test
SHELL := /bin/bash
SWIFT ?= swift
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# What building and running imgpipe needs (`make demo`); the test-only servers and tools
# come with `make test` (TEST_DEB_PACKAGES, and moto from PyPI).
DEB_PACKAGES := libvips-dev libvips-tools libsqlite3-dev libcurl4-openssl-dev zlib1g-dev libpq-dev libsnappy-dev \
	libzstd-dev pkg-config fonts-dejavu-core
TEST_DEB_PACKAGES := postgresql chromium slurm-wlm munge
BIN := .build/debug/imgpipe
PREFIX ?= /usr/local
MAN_PAGE := .build/plugins/GenerateManual/outputs/imgpipe/imgpipe.1

.PHONY: deps test-deps build release man install demo lint test fuzz bench bench-scaleout bench-deps clean

# What imgpipe needs, installed only when something is missing: the libraries (found with
# pkg-config: libvips, SQLite, libcurl, zlib, libpq, and libsnappy and libzstd for Parquet),
# vipsthumbnail and the DejaVu fonts captions use. No server, no browser: `make demo` asks for nothing more.
deps:
	@if pkg-config --exists vips sqlite3 libcurl zlib libpq snappy libzstd && command -v vipsthumbnail >/dev/null \
	    && [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf ]; then \
	  echo "deps: libvips $$(pkg-config --modversion vips), sqlite $$(pkg-config --modversion sqlite3), curl $$(pkg-config --modversion libcurl), libpq $$(pkg-config --modversion libpq), fonts present"; \
	else \
	  echo "deps: installing $(DEB_PACKAGES)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(DEB_PACKAGES); \
	fi

# What the tests add, again only when missing: PostgreSQL's server (the shared-state tests
# start a throwaway cluster of their own), Chromium (the contact-sheet test) and Slurm with
# munge (the Slurm script's test starts a one-node cluster of its own) from Debian; from PyPI Python's jsonschema (the schema test), and moto's S3 server with boto3
# (the S3 tests run against it and read back through boto3), and pyarrow and DuckDB (Parquet
# files are checked against both).
test-deps: deps
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && command -v chromium >/dev/null \
	    && [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && command -v sbatch >/dev/null \
	    && [ -x /usr/sbin/munged ]; then \
	  echo "test-deps: postgresql, chromium, slurm, munge present"; \
	else \
	  echo "test-deps: installing $(TEST_DEB_PACKAGES)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(TEST_DEB_PACKAGES); \
	fi
	@python3 -c 'import jsonschema' 2>/dev/null || python3 -m pip install -q jsonschema \
	  || python3 -m pip install -q --break-system-packages jsonschema
	@python3 -c 'import moto.server, flask, boto3, yaml' 2>/dev/null || python3 -m pip install -q 'moto[server]' boto3 pyyaml \
	  || python3 -m pip install -q --break-system-packages 'moto[server]' boto3 pyyaml
	@python3 -c 'import pyarrow, duckdb' 2>/dev/null || python3 -m pip install -q pyarrow duckdb \
	  || python3 -m pip install -q --break-system-packages pyarrow duckdb

# Quiet: only errors are printed (the packages imgpipe depends on compile with warnings of
# their own; imgpipe's own code has none).
build: deps
	@echo "build: swift build (a first build takes a few minutes)"
	@$(SWIFT) build --quiet
	@echo "build: $(BIN)"

release: deps
	$(SWIFT) build -c release

# The man page, made from the command-line definitions by ArgumentParser's generate-manual
# plugin (every command, option and help text): `man -l $(MAN_PAGE)` reads it unpacked.
man: build
	@$(SWIFT) package --disable-sandbox plugin generate-manual --configuration debug >/dev/null
	@echo "man: $(MAN_PAGE)"

install: release man
	$(SUDO) install -D -m 755 .build/release/imgpipe $(PREFIX)/bin/imgpipe
	$(SUDO) install -D -m 644 $(MAN_PAGE) $(PREFIX)/share/man/man1/imgpipe.1

demo: build
	$(BIN) run pipelines/samples.json --new
	@echo "outputs in out/; previews: $(BIN) dry-run pipelines/samples.json"

# One test at a time (--no-parallel): on a 2-core machine the suite's tests in parallel
# start imgpipe processes, PostgreSQL clusters and libvips work all at once, and full runs
# on one such machine failed by the load alone (a delivery over its 5 s timeout); one at a
# time, the suite takes 7–8 minutes there, not 4. The release build is compiled first (not
# tested): `make bench` and `make install` use it, and it once failed to compile (a name
# glibc gives, found in debug builds only) with every test passing.
test: build test-deps lint
	@echo "test: swift build -c release (compiled only)"
	@$(SWIFT) build -c release --quiet
	$(SWIFT) test --no-parallel

# The committed .swift-format (4 spaces, 130 columns, swift-format's default rules but
# OnlyOneTrailingClosureArgument: a call such as `list(expecting: { … }) { item in … }` reads
# best as it is); `swift format format -i -r -p Sources Tests Package.swift` applies it.
lint:
	$(SWIFT) format lint --strict -r -p Sources Tests Package.swift

clean:
	rm -rf .build out preview .imgpipe

# Benchmarks are not tests: `make test` never runs them.
bench-deps: test-deps
	@command -v mogrify >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq imagemagick; }
	@command -v curl >/dev/null || { DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq curl; }
	@command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq nginx-light; }

bench: bench-deps
	bench/run.sh

# Shared runs through PostgreSQL: the store under simulated workers and the real pipeline
# on two processes (a cluster of its own, fsync on); see bench/scaleout.sh.
bench-scaleout: bench-deps
	bench/scaleout.sh

# Fuzzing is not a test either: `make test` never runs it. A separate build folder (the
# instrumented build would otherwise replace the normal one); seeds are the samples in
# every accepted format, made small, and small Parquet tables (pyarrow), written at run
# time under .build-fuzz/corpus; any crash, timeout or input over the memory limit lands in
# .build-fuzz/artifacts/ (replay it with `swift run imgpipe-fuzz FILE`).
FUZZ_SECONDS ?= 60
FUZZ_DIR := .build-fuzz
fuzz: deps
	$(SWIFT) build --build-path $(FUZZ_DIR) --product imgpipe-fuzz -Xswiftc -DFUZZING -Xswiftc -sanitize=fuzzer
	mkdir -p $(FUZZ_DIR)/corpus $(FUZZ_DIR)/artifacts
	for f in samples/*.jpg samples/*.png samples/*.webp; do \
	  for ext in jpg png gif webp tif avif; do \
	    vipsthumbnail "$$f" -s 96 -o "$(CURDIR)/$(FUZZ_DIR)/corpus/$$(basename "$${f%.*}")-seed.$$ext" 2>/dev/null || true; \
	  done; done
	python3 -c 'import sys, pyarrow as pa, pyarrow.parquet as pq; t = pa.table({"url": [f"u{i % 7}" for i in range(60)], "n": pa.array([i if i % 5 else None for i in range(60)], pa.int64()), "f": [i % 2 == 0 for i in range(60)]}); [pq.write_table(t, f"{sys.argv[1]}/table-{c}-{v}.parquet", compression=c, data_page_version=v, use_dictionary=(c != "zstd"), row_group_size=25) for c in ("snappy", "zstd", "gzip", "none") for v in ("1.0", "2.0")]' \
	  $(FUZZ_DIR)/corpus 2>/dev/null || echo "fuzz: no Parquet seeds (pyarrow missing: make test-deps)"
	$(FUZZ_DIR)/debug/imgpipe-fuzz $(FUZZ_DIR)/corpus -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=400 \
	  -timeout=10 -max_len=262144 -artifact_prefix=$(FUZZ_DIR)/artifacts/ -print_final_stats=1
