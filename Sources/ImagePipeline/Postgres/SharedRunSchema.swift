import Foundation
import PipelineKit

/// The tables of runs shared through PostgreSQL (`--state postgres://…`), made on first use.
///
/// - `imgpipe_run`: one row per run, with the feed's cursor and the lister's lease (one
///   worker lists at a time), the next item sequence number and chunk number.
/// - `imgpipe_chunk`: consecutive items claimed together (`FOR UPDATE SKIP LOCKED`), with
///   the lease (owner, token, expiry) and the counters `status` reads instead of counting
///   item rows.
/// - `imgpipe_item`: one row per feed item, unique per (run, key).
/// - `imgpipe_worker`: one row per worker process (host:pid) with its last heartbeat.
/// - `imgpipe_name`: the output names of the run, each held by one item key.
/// - `imgpipe_kept` and `imgpipe_sighting`: `dedup`'s kept items and sightings (`SharedDedup`).
///
/// Lease tokens come from one sequence: a token is never handed out twice, so a write
/// fenced by (owner, token) from a lease that was rescued and claimed again is refused even
/// when the same worker claims the chunk back.
enum SharedRunSchema {
    /// Makes the tables unless they are there. Under a transaction-scoped advisory lock:
    /// workers starting together do not race on `CREATE TABLE IF NOT EXISTS` (which can fail
    /// on a concurrent catalog insert). When the tables exist no DDL is sent at all: even
    /// `CREATE INDEX IF NOT EXISTS` takes a share lock on its table, which deadlocked a
    /// joining worker against the lister's page insert.
    static func make(on connection: PostgresConnection) throws {
        if try exists(on: connection) { return }
        try connection.transaction {
            try connection.execute("SELECT pg_advisory_xact_lock(7234501)")
            if try exists(on: connection) { return }
            for statement in statements { try connection.execute(statement) }
        }
    }

    /// True when the tables are there as this version makes them: the last statement's
    /// index, `imgpipe_item_placeholder`, is. (A database made by an earlier version lacks it, and
    /// `make` adds what is missing, every statement being `IF NOT EXISTS`.) Read from
    /// `pg_class` with the statement's own snapshot, not through `to_regclass`: a
    /// session's catalog cache may keep a table missing that another session has since made
    /// (the check after the advisory lock then said "missing" and a second worker ran the DDL
    /// again, its `ALTER TABLE` deadlocking against a first run's insert).
    static func exists(on connection: PostgresConnection) throws -> Bool {
        try connection.execute(
            """
            SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                           WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = 'imgpipe_item_placeholder')
                AS present
            """
        ).first?.bool("present") == true
    }

    /// SQL for chunk `c`'s tally made from its items' own (those `itemsWhere` keeps, as `i`):
    /// an item still pending has none.
    static func chunkTally(itemsWhere condition: String = "true") -> String {
        """
        coalesce((SELECT jsonb_object_agg(k, n) FROM (
            SELECT t.key AS k, sum(t.value::bigint) AS n FROM imgpipe_item i, jsonb_each_text(i.tally) t
            WHERE i.run_id = c.run_id AND i.chunk = c.id AND (\(condition)) GROUP BY t.key) s), '{}'::jsonb)
        """
    }

    /// True when a run table is there at all, made by this version or an earlier one: what
    /// `status` and `export` need to read (they write nothing, and do not upgrade).
    static func present(on connection: PostgresConnection) throws -> Bool {
        try connection.execute(
            """
            SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = current_schema() AND tablename = 'imgpipe_run')
                AS present
            """
        ).first?.bool("present") == true
    }

    /// Made in this order; `exists` looks for the index made last.
    static let statements = [
        """
        CREATE TABLE IF NOT EXISTS imgpipe_run (
            id BIGSERIAL PRIMARY KEY,
            uuid TEXT NOT NULL UNIQUE,
            pipeline_name TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('running', 'finished', 'interrupted', 'abandoned')),
            created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            finished_at TIMESTAMPTZ,
            chunk_size INTEGER NOT NULL CHECK (chunk_size > 0),
            next_seq BIGINT NOT NULL DEFAULT 0,
            next_chunk BIGINT NOT NULL DEFAULT 0,
            feed_cursor TEXT,
            feed_complete BOOLEAN NOT NULL DEFAULT false,
            pages_listed INTEGER NOT NULL DEFAULT 0,
            lister TEXT,
            lister_token BIGINT,
            lister_expires TIMESTAMPTZ
        )
        """,
        "CREATE INDEX IF NOT EXISTS imgpipe_run_pipeline ON imgpipe_run (pipeline_name, id)",
        // Added after the first release of shared runs: made here for databases of before too.
        "ALTER TABLE imgpipe_run ADD COLUMN IF NOT EXISTS item_limit BIGINT CHECK (item_limit >= 0)",
        "ALTER TABLE imgpipe_run ADD COLUMN IF NOT EXISTS refreshing BOOLEAN NOT NULL DEFAULT false",
        "ALTER TABLE imgpipe_run ADD COLUMN IF NOT EXISTS refresh_error TEXT",
        """
        CREATE TABLE IF NOT EXISTS imgpipe_chunk (
            run_id BIGINT NOT NULL REFERENCES imgpipe_run(id) ON DELETE CASCADE,
            id BIGINT NOT NULL,
            first_seq BIGINT NOT NULL,
            last_seq BIGINT NOT NULL,
            items INTEGER NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('pending', 'leased', 'done')),
            owner TEXT,
            token BIGINT,
            lease_expires TIMESTAMPTZ,
            done INTEGER NOT NULL DEFAULT 0,
            failed INTEGER NOT NULL DEFAULT 0,
            skipped INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (run_id, id),
            CHECK ((state = 'leased') = (owner IS NOT NULL AND token IS NOT NULL AND lease_expires IS NOT NULL))
        )
        """,
        // The claim reads this index in order and stops at its LIMIT.
        "CREATE INDEX IF NOT EXISTS imgpipe_chunk_pending ON imgpipe_chunk (run_id, id) WHERE state = 'pending'",
        "CREATE INDEX IF NOT EXISTS imgpipe_chunk_leased ON imgpipe_chunk (run_id, lease_expires) WHERE state = 'leased'",
        """
        CREATE TABLE IF NOT EXISTS imgpipe_item (
            run_id BIGINT NOT NULL REFERENCES imgpipe_run(id) ON DELETE CASCADE,
            seq BIGINT NOT NULL,
            key TEXT NOT NULL,
            location TEXT NOT NULL,
            metadata TEXT,
            name_key TEXT NOT NULL,
            name_stem TEXT NOT NULL,
            is_local BOOLEAN NOT NULL,
            from_fallback BOOLEAN NOT NULL DEFAULT false,
            chunk BIGINT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('pending', 'done', 'failed', 'skipped')),
            attempts INTEGER NOT NULL DEFAULT 0,
            reason TEXT,
            message TEXT,
            -- tier, outputs and deliveries as JSON (SharedItemDetail), set when the item ends
            detail TEXT,
            PRIMARY KEY (run_id, seq),
            UNIQUE (run_id, key)
        )
        """,
        "CREATE INDEX IF NOT EXISTS imgpipe_item_chunk ON imgpipe_item (run_id, chunk, seq)",
        // `status` counts failures and skips by reason over those items alone.
        "CREATE INDEX IF NOT EXISTS imgpipe_item_failed ON imgpipe_item (run_id, reason) WHERE status = 'failed'",
        "CREATE INDEX IF NOT EXISTS imgpipe_item_skipped ON imgpipe_item (run_id, reason) WHERE status = 'skipped'",
        """
        CREATE TABLE IF NOT EXISTS imgpipe_worker (
            run_id BIGINT NOT NULL REFERENCES imgpipe_run(id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            items_done BIGINT NOT NULL DEFAULT 0,
            PRIMARY KEY (run_id, name)
        )
        """,
        "CREATE SEQUENCE IF NOT EXISTS imgpipe_lease_token",
        """
        CREATE TABLE IF NOT EXISTS imgpipe_name (
            run_id BIGINT NOT NULL REFERENCES imgpipe_run(id) ON DELETE CASCADE,
            name TEXT NOT NULL,
            key TEXT NOT NULL,
            PRIMARY KEY (run_id, name)
        )
        """,
        // `status`'s counters by sink, output and tier: per item, summed per chunk. Last: its
        // presence says every statement before it has been made (`exists`).
        "ALTER TABLE imgpipe_chunk ADD COLUMN IF NOT EXISTS tally JSONB NOT NULL DEFAULT '{}'::jsonb",
        "ALTER TABLE imgpipe_item ADD COLUMN IF NOT EXISTS tally JSONB",
        // Items ended by an earlier version have their detail but no tally: made from it,
        // then their chunks' (this runs once, when the columns above are added).
        """
        UPDATE imgpipe_item i SET tally = coalesce((SELECT jsonb_object_agg(k, n) FROM (
            SELECT 'tier/' || (i.detail::jsonb ->> 'tier') AS k, 1::bigint AS n WHERE i.detail::jsonb ->> 'tier' IS NOT NULL
            UNION ALL
            SELECT 'sink/' || (d ->> 'sink') || '/' || (d ->> 'status'), count(*)
            FROM jsonb_array_elements(i.detail::jsonb -> 'deliveries') d WHERE d ->> 'status' IN ('done', 'failed') GROUP BY 1
            UNION ALL
            SELECT 'output/' || (d ->> 'output') || '/' || (d ->> 'status'), count(*)
            FROM jsonb_array_elements(i.detail::jsonb -> 'deliveries') d WHERE d ->> 'status' IN ('done', 'failed') GROUP BY 1
        ) s), '{}'::jsonb)
        WHERE i.tally IS NULL AND i.detail IS NOT NULL
        """,
        "UPDATE imgpipe_chunk c SET tally = \(chunkTally()) WHERE c.tally = '{}'::jsonb AND c.done + c.failed + c.skipped > 0",
        // `dedup` (`SharedDedup`): the kept items, by input hash and by the four 16-bit bands
        // of their perceptual hash (multi-index hashing: `NearHashIndex`).
        """
        CREATE TABLE IF NOT EXISTS imgpipe_kept (
            run_id BIGINT NOT NULL REFERENCES imgpipe_run(id) ON DELETE CASCADE,
            seq BIGINT NOT NULL,
            key TEXT NOT NULL,
            sha256 TEXT,
            phash BIGINT,
            band0 INTEGER,
            band1 INTEGER,
            band2 INTEGER,
            band3 INTEGER,
            thumbhash TEXT,
            PRIMARY KEY (run_id, seq)
        )
        """,
        "CREATE INDEX IF NOT EXISTS imgpipe_kept_sha256 ON imgpipe_kept (run_id, sha256, seq) WHERE sha256 IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS imgpipe_kept_band0 ON imgpipe_kept (run_id, band0) INCLUDE (phash, seq)",
        "CREATE INDEX IF NOT EXISTS imgpipe_kept_band1 ON imgpipe_kept (run_id, band1) INCLUDE (phash, seq)",
        "CREATE INDEX IF NOT EXISTS imgpipe_kept_band2 ON imgpipe_kept (run_id, band2) INCLUDE (phash, seq)",
        "CREATE INDEX IF NOT EXISTS imgpipe_kept_band3 ON imgpipe_kept (run_id, band3) INCLUDE (phash, seq)",
        // `dedup.placeholders`: per host and input hash, how many items gave those bytes
        // and the first keys (JSON).
        """
        CREATE TABLE IF NOT EXISTS imgpipe_sighting (
            run_id BIGINT NOT NULL REFERENCES imgpipe_run(id) ON DELETE CASCADE,
            host TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            count INTEGER NOT NULL,
            keys TEXT NOT NULL,
            PRIMARY KEY (run_id, host, sha256)
        )
        """,
        // An item whose `dedup` verdict is made (the items after it may have theirs), and
        // the items still waited for, in feed order (`SharedDedup`'s floor).
        "ALTER TABLE imgpipe_item ADD COLUMN IF NOT EXISTS judged BOOLEAN NOT NULL DEFAULT false",
        "CREATE INDEX IF NOT EXISTS imgpipe_item_unjudged ON imgpipe_item (run_id, seq) WHERE status = 'pending' AND NOT judged",
        // Made before its bytes were found to be its host's placeholder.
        "ALTER TABLE imgpipe_item ADD COLUMN IF NOT EXISTS placeholder BOOLEAN NOT NULL DEFAULT false",
        // Last: its presence says every statement before it has been made (`exists`).
        "CREATE INDEX IF NOT EXISTS imgpipe_item_placeholder ON imgpipe_item (run_id) WHERE placeholder",
    ]
}

/// A PostgreSQL text-format array literal of `values` (`{"a","b\"c"}`), for `$n::text[]`.
/// Each item's end writes several of these (a worker's hot path): a value without a quote
/// or a backslash, the usual one, is appended whole. (Foundation's `replacingOccurrences`,
/// twice per value, was about half of what a worker's bookkeeping added to `run`'s over
/// 200 items: callgrind, 205 M instructions.)
func postgresTextArray(_ values: [String?]) -> String {
    var text = "{"
    for (index, value) in values.enumerated() {
        if index > 0 { text += "," }
        guard let value else {
            text += "NULL"
            continue
        }
        text += "\""
        if value.utf8.contains(where: { $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: "\"") }) {
            for scalar in value.unicodeScalars {
                if scalar == "\\" || scalar == "\"" { text.unicodeScalars.append("\\") }
                text.unicodeScalars.append(scalar)
            }
        } else {
            text += value
        }
        text += "\""
    }
    return text + "}"
}
