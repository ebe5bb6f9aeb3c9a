# Shared by the bench scripts: source it from the repository root.
# shellcheck shell=bash
WORK=bench/work
BIN=${BIN:-.build/release/imgpipe}
mkdir -p "$WORK"

build_release() { swift build -c release >/dev/null; }

cpu_name() { grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'; }

# make_corpus DIR COUNT WIDTHS… — COUNT photographic JPEGs (q90) made from samples/: each
# sample scaled to each width, as is and mirrored, copied round-robin. Cached: kept when
# DIR already holds COUNT files.
make_corpus() {
  local dir=$1 count=$2; shift 2
  [ "$(ls "$dir" 2>/dev/null | wc -l)" -eq "$count" ] && return 0
  rm -rf "$dir" "$dir.base"; mkdir -p "$dir" "$dir.base"
  local sample base width
  for sample in samples/*.jpg samples/*.png samples/*.webp; do
    base=$(basename "${sample%.*}")
    for width in "$@"; do
      vips thumbnail "$sample" "$dir.base/$base-$width.v" "$width" --height 100000 --size both
      vips colourspace "$dir.base/$base-$width.v" "$dir.base/$base-$width-a.jpg[Q=90,strip]" srgb
      vips flip "$dir.base/$base-$width.v" "$dir.base/$base-$width-f.v" horizontal
      vips colourspace "$dir.base/$base-$width-f.v" "$dir.base/$base-$width-b.jpg[Q=90,strip]" srgb
    done
  done
  local bases=("$dir.base"/*.jpg) i
  for i in $(seq 1 "$count"); do
    cp "${bases[$(( (i - 1) % ${#bases[@]} ))]}" "$dir/$(printf 'img-%05d.jpg' "$i")"
  done
  rm -rf "$dir.base"
}

# web_corpus — the 1000 web-sized JPEGs (640–1600 px) of works A and B, in $WEB_CORPUS.
WEB_CORPUS=bench/corpus/web-1000
web_corpus() { make_corpus "$WEB_CORPUS" 1000 640 800 1024 1280 1600; }

# work_pipeline FILE NAME SOURCE_JSON OUT [NAME_TEMPLATE] — the pipeline of works A and B
# (fit 256×256, JPEG q85, a directory sink OUT, relative to $WORK) over SOURCE_JSON, written
# to FILE; NAME_TEMPLATE names the outputs (the default template when absent).
work_pipeline() {
  local name=""
  [ -n "${5:-}" ] && name=", \"name\": \"$5\""
  cat > "$1" <<JSON
{ "version": 1, "name": "$2", "source": $3,
  "filters": [ { "op": "fit", "width": 256, "height": 256 } ],
  "output": { "format": "jpeg", "quality": 85$name }, "sink": { "type": "directory", "path": "$4" } }
JSON
}

# corpus_subset SRC N DEST — the first N files of SRC, hard-linked into DEST (made anew).
corpus_subset() {
  rm -rf "$3"; mkdir -p "$3"
  ls "$1" | sed -n "1,${2}p" | while read -r f; do ln "$1/$f" "$3/$f"; done
}

# start_server FOLDER [args…] — bench/server.py on loopback; sets PORT and SERVER_PID.
start_server() {
  local folder=$1; shift
  rm -f "$WORK/port"
  python3 bench/server.py "$folder" --port-file "$WORK/port" "$@" & SERVER_PID=$!
  for _ in $(seq 200); do [ -s "$WORK/port" ] && break; sleep 0.05; done
  PORT=$(cat "$WORK/port")
}

# url_list FOLDER N FILE [PORT] — N URLs of FOLDER's files as served at /images/ on PORT
# (bench/server.py's or nginx's; $PORT, bench/server.py's, when not given), its files in
# turn, each made unique with ?n=i, written to FILE.
url_list() {
  ls "$1" | sed "s|^|http://127.0.0.1:${4:-$PORT}/images/|" > "$3.names"
  python3 -c "import sys; lines=open(sys.argv[1]).read().split(); n=int(sys.argv[2]); print('\n'.join(f'{lines[i % len(lines)]}?n={i}' for i in range(n)))" \
    "$3.names" "$2" > "$3"
  rm -f "$3.names"
}

stop_server() { kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=; }

# start_origin FOLDER — nginx on loopback serving FOLDER's files at /images/<name> (with
# ETags and keep-alive, one process); sets ORIGIN_PORT and ORIGIN_PID. The origin of work
# B: a real static-file server, whose CPU on this machine's two cores is small, as a
# remote origin's is nil; bench/server.py (Python) takes about three times as much.
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
start_origin() {
  local dir=$WORK/nginx root
  root=$(cd "$1" && pwd)
  rm -rf "$dir"; mkdir -p "$dir"
  ORIGIN_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  cat > "$dir/nginx.conf" <<CONF
worker_processes 1;
master_process off;
daemon off;
pid $PWD/$dir/nginx.pid;
error_log $PWD/$dir/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  keepalive_requests 1000000;
  client_body_temp_path $PWD/$dir/body;
  proxy_temp_path $PWD/$dir/proxy;
  fastcgi_temp_path $PWD/$dir/fastcgi;
  uwsgi_temp_path $PWD/$dir/uwsgi;
  scgi_temp_path $PWD/$dir/scgi;
  types { image/jpeg jpg; }
  server {
    listen 127.0.0.1:$ORIGIN_PORT;
    location /images/ { alias $root/; }
  }
}
CONF
  "$NGINX" -e "$PWD/$dir/error.log" -c "$PWD/$dir/nginx.conf" -p "$PWD/$dir" & ORIGIN_PID=$!
  local files=("$1"/*) name
  name=$(basename "${files[0]}")
  for _ in $(seq 100); do
    curl -fso /dev/null "http://127.0.0.1:$ORIGIN_PORT/images/$name" && return 0
    sleep 0.05
  done
  echo "nginx did not start: $(cat "$dir/error.log" 2>/dev/null)" >&2; return 1
}

stop_origin() { kill "$ORIGIN_PID" 2>/dev/null; wait "$ORIGIN_PID" 2>/dev/null || true; ORIGIN_PID=; }

# timed LABEL FILE COMMAND… — runs COMMAND, appends "LABEL wall peakRSS(KB)" to FILE.
timed() {
  local label=$1 file=$2; shift 2
  /usr/bin/time -f "%e %M" -o "$WORK/time.txt" "$@" >"$WORK/stdout.txt" 2>"$WORK/stderr.txt" || {
    echo "$label failed:" >&2; tail -20 "$WORK/stderr.txt" >&2; return 1; }
  echo "$label $(cat "$WORK/time.txt")" >> "$file"
}

# aside PATH… — moves each PATH that exists into $WORK/aside (a rename: no inode is freed);
# clear_aside deletes them, at the end of a bench. Runs do not delete the previous round's
# files just before they start: on a journal-less ext4 (this machine's) a new file walks
# past every inode of its group freed in the last 30 s, which charged the run that followed
# the most deletions for them (bench/RESULTS.md: ext4_create up to 10 % of a run's CPU).
ASIDE_COUNT=0
aside() {
  local path
  mkdir -p "$WORK/aside"
  for path in "$@"; do
    [ -e "$path" ] || continue
    ASIDE_COUNT=$((ASIDE_COUNT + 1))
    mv "$path" "$WORK/aside/$$-$ASIDE_COUNT"
  done
}
clear_aside() { rm -rf "$WORK/aside"; }

# count_files DIR — regular files below DIR.
count_files() { find "$1" -type f | wc -l; }

# alternate "SIDES" "KINDS" FUNCTION — RUNS rounds; in each, for each side (`head` is this
# tree's $BIN, `base` the baseline $BASE) and each kind, calls FUNCTION KIND SIDE BINARY.
# Alternating the builds inside each round spreads the machine's noise over both.
alternate() {
  local sides=$1 kinds=$2 body=$3 run side kind bin
  for run in $(seq 1 "$RUNS"); do
    for side in $sides; do
      bin=$BIN; [ "$side" = base ] && bin=$BASE
      for kind in $kinds; do "$body" "$kind" "$side" "$bin"; done
    done
  done
}

# start_postgres — a PostgreSQL cluster of the bench's own on loopback (fsync on, 100
# connections), stopped and removed when the script exits; sets PGPORT. fresh_db makes a
# new database in it and sets URL to it.
start_postgres() {
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  PGDIR=$(mktemp -d /tmp/imgpipe-bench-pg-XXXX); chmod 755 "$PGDIR"
  PGAS=(); [ "$(id -u)" = 0 ] && { chown postgres "$PGDIR"; PGAS=(runuser -u postgres --); }
  echo bench > "$PGDIR/pw"
  "${PGAS[@]}" "$PGBIN/initdb" -D "$PGDIR/data" -U imgpipe --pwfile="$PGDIR/pw" --auth=trust >/dev/null
  PGPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "${PGAS[@]}" "$PGBIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/log" -w \
    -o "-h 127.0.0.1 -p $PGPORT -k $PGDIR -c max_connections=100" start >/dev/null
  trap '"${PGAS[@]}" "$PGBIN/pg_ctl" -D "$PGDIR/data" -m fast stop >/dev/null 2>&1; rm -rf "$PGDIR"' EXIT
}
PGDB=0
fresh_db() {
  PGDB=$((PGDB + 1))
  psql -q -h 127.0.0.1 -p "$PGPORT" -U imgpipe postgres -c "CREATE DATABASE b$PGDB" >/dev/null
  URL="postgres://imgpipe:bench@127.0.0.1:$PGPORT/b$PGDB"
}
