import Foundation
import GRDB
import PipelineKit
import Synchronization

/// The state file: one SQLite database (WAL mode) holding runs, their items and each
/// item's delivery to each sink. Opened once per process; every write goes through
/// `apply(_:)` in batches (see `StoreWriter`).
public final class RunStore: Sendable {
    let database: DatabaseQueue
    public let path: String
    /// The main file's size and modification time after this process's last write, and
    /// whether it was ever found otherwise before the next (`wasChanged`).
    private let watch = Mutex<(stamp: FileStamp?, changed: Bool)>((nil, false))

    /// Opens (creating if needed) the state file and brings its schema up to date; with
    /// `readOnly`, opens an existing one without writing anything to it (`plan`), and
    /// refuses one whose schema is older than this imgpipe's.
    public init(path: String, readOnly: Bool = false) throws {
        self.path = path
        if readOnly {
            var configuration = Configuration()
            configuration.readonly = true
            do {
                database = try DatabaseQueue(path: path, configuration: configuration)
            } catch {
                throw StoreError("cannot open state file \(path): \(error)")
            }
            let migrator = Self.migrator
            let applied = (try? read { try migrator.appliedIdentifiers($0) }) ?? []
            guard applied.contains(where: { $0.hasPrefix("v6:") }) else {
                throw StoreError(
                    "state file \(path) was written by an earlier imgpipe: its runs do not record what each "
                        + "source was, so there is nothing to compare with (`imgpipe run --incremental` upgrades "
                        + "it and makes everything once)")
            }
            guard applied.isSuperset(of: migrator.migrations) else {
                throw StoreError(
                    "state file \(path) was written by an earlier imgpipe; reading it once with `imgpipe status` "
                        + "brings it up to date (this command writes nothing, so it does not)")
            }
            return
        }
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var configuration = Configuration()
        configuration.journalMode = .wal
        configuration.busyMode = .timeout(5)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            // Made once, outside any transaction: made in a batch, it would empty GRDB's
            // statement caches each time (any CREATE does), and a rollback would drop it.
            try db.execute(sql: HandOn.table)
        }
        do {
            database = try DatabaseQueue(path: path, configuration: configuration)
            try Self.migrator.migrate(database)
        } catch {
            throw StoreError("cannot open state file \(path): \(error)")
        }
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE run (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        pipelinePath TEXT NOT NULL,
                        pipelineName TEXT NOT NULL,
                        document TEXT NOT NULL,
                        fingerprint TEXT NOT NULL,
                        sinks TEXT NOT NULL,
                        state TEXT NOT NULL,
                        feedComplete INTEGER NOT NULL DEFAULT 0,
                        itemLimit INTEGER,
                        workDirectory TEXT NOT NULL,
                        startedAt DOUBLE NOT NULL,
                        finishedAt DOUBLE,
                        elapsed DOUBLE NOT NULL DEFAULT 0
                    );
                    CREATE TABLE item (
                        runId INTEGER NOT NULL REFERENCES run(id) ON DELETE CASCADE,
                        seq INTEGER NOT NULL,
                        key TEXT NOT NULL,
                        location TEXT NOT NULL,
                        metadata TEXT,
                        status TEXT NOT NULL CHECK (status IN ('pending', 'fetched', 'processed', 'done', 'failed')),
                        attempts INTEGER NOT NULL DEFAULT 0,
                        reason TEXT,
                        message TEXT,
                        httpStatus INTEGER,
                        spoolPath TEXT,
                        stagedPath TEXT,
                        outputName TEXT,
                        outputHash TEXT,
                        outputBytes INTEGER,
                        width INTEGER,
                        height INTEGER,
                        updatedAt DOUBLE NOT NULL,
                        PRIMARY KEY (runId, key)
                    );
                    CREATE UNIQUE INDEX item_seq ON item(runId, seq);
                    CREATE INDEX item_status ON item(runId, status, seq);
                    CREATE UNIQUE INDEX item_output ON item(runId, outputName) WHERE outputName IS NOT NULL;
                    CREATE TABLE delivery (
                        runId INTEGER NOT NULL,
                        itemKey TEXT NOT NULL,
                        sink TEXT NOT NULL,
                        status TEXT NOT NULL CHECK (status IN ('pending', 'done', 'failed')),
                        attempts INTEGER NOT NULL DEFAULT 0,
                        httpStatus INTEGER,
                        remoteURL TEXT,
                        message TEXT,
                        updatedAt DOUBLE NOT NULL,
                        PRIMARY KEY (runId, itemKey, sink),
                        FOREIGN KEY (runId, itemKey) REFERENCES item(runId, key) ON DELETE CASCADE
                    );
                    CREATE INDEX delivery_status ON delivery(runId, sink, status);
                    """)
        }
        migrator.registerMigration("v2: names and tiers of remote items") { db in
            try db.execute(
                sql: """
                    ALTER TABLE item ADD COLUMN nameKey TEXT;
                    ALTER TABLE item ADD COLUMN nameStem TEXT;
                    ALTER TABLE item ADD COLUMN tier TEXT;
                    """)
        }
        migrator.registerMigration("v3: run UUIDs") { db in
            // Idempotency keys are made from a run's UUID: the integer id starts at 1 in
            // every state file, so two state files (or a deleted and recreated one) would
            // send the same keys. Runs made before this get a random UUID of their own.
            try db.execute(
                sql: """
                    ALTER TABLE run ADD COLUMN uuid TEXT;
                    UPDATE run SET uuid = lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' ||
                        substr(hex(randomblob(2)), 2) || '-' || substr('89ab', 1 + (abs(random()) % 4), 1) ||
                        substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6)));
                    CREATE UNIQUE INDEX run_uuid ON run(uuid);
                    """)
        }
        migrator.registerMigration("v4: skipped items") { db in
            // SQLite cannot change a CHECK constraint in place: the item table is made anew
            // from its own definition with `skipped` among its statuses, its rows copied,
            // and its indexes rebuilt. GRDB runs a migration with foreign keys off and checks
            // them at the end, so the deliveries that refer to items are neither cascaded
            // away nor left dangling. A skipped item keeps its reason (`opt-out`, `robots`,
            // `too-small`, `aspect`, `format`) in `reason`, as a failed one does.
            let statuses = "('pending', 'fetched', 'processed', 'done', 'failed')"
            guard
                let definition = try String.fetchOne(
                    db, sql: "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'item'"),
                definition.contains(statuses), definition.hasPrefix("CREATE TABLE item (")
            else {
                throw StoreError("state file: the item table is not the one imgpipe made; cannot add the skipped status")
            }
            let indexes = try String.fetchAll(
                db, sql: "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'item' AND sql IS NOT NULL")
            let renewed =
                definition
                .replacingOccurrences(of: "CREATE TABLE item (", with: "CREATE TABLE item_v4 (")
                .replacingOccurrences(of: statuses, with: "('pending', 'fetched', 'processed', 'done', 'skipped', 'failed')")
            try db.execute(sql: renewed)
            try db.execute(sql: "INSERT INTO item_v4 SELECT * FROM item; DROP TABLE item; ALTER TABLE item_v4 RENAME TO item")
            for index in indexes { try db.execute(sql: index) }
        }
        migrator.registerMigration("v5: several outputs per item") { db in
            // An item's outputs move to a table of their own, one row per (item, output):
            // the staged file, the claimed name (unique in the run, across outputs) and what
            // was made. A delivery is of one output to one sink. Rows of earlier runs become
            // the output `default`, which is the id of a pipeline's only output.
            try db.execute(
                sql: """
                    CREATE TABLE output (
                        runId INTEGER NOT NULL,
                        itemKey TEXT NOT NULL,
                        output TEXT NOT NULL,
                        name TEXT,
                        stagedPath TEXT,
                        hash TEXT,
                        bytes INTEGER,
                        width INTEGER,
                        height INTEGER,
                        PRIMARY KEY (runId, itemKey, output),
                        FOREIGN KEY (runId, itemKey) REFERENCES item(runId, key) ON DELETE CASCADE
                    );
                    CREATE UNIQUE INDEX output_name ON output(runId, name) WHERE name IS NOT NULL;
                    INSERT INTO output (runId, itemKey, output, name, stagedPath, hash, bytes, width, height)
                        SELECT runId, key, 'default', outputName, stagedPath, outputHash, outputBytes, width, height FROM item
                        WHERE outputName IS NOT NULL OR stagedPath IS NOT NULL OR outputHash IS NOT NULL;
                    DROP INDEX item_output;
                    ALTER TABLE item DROP COLUMN outputName;
                    ALTER TABLE item DROP COLUMN stagedPath;
                    ALTER TABLE item DROP COLUMN outputHash;
                    ALTER TABLE item DROP COLUMN outputBytes;
                    ALTER TABLE item DROP COLUMN width;
                    ALTER TABLE item DROP COLUMN height;
                    CREATE TABLE delivery_v5 (
                        runId INTEGER NOT NULL,
                        itemKey TEXT NOT NULL,
                        output TEXT NOT NULL,
                        sink TEXT NOT NULL,
                        status TEXT NOT NULL CHECK (status IN ('pending', 'done', 'failed')),
                        attempts INTEGER NOT NULL DEFAULT 0,
                        httpStatus INTEGER,
                        remoteURL TEXT,
                        message TEXT,
                        updatedAt DOUBLE NOT NULL,
                        PRIMARY KEY (runId, itemKey, output, sink),
                        FOREIGN KEY (runId, itemKey) REFERENCES item(runId, key) ON DELETE CASCADE
                    );
                    INSERT INTO delivery_v5 (runId, itemKey, output, sink, status, attempts, httpStatus, remoteURL, message, updatedAt)
                        SELECT runId, itemKey, 'default', sink, status, attempts, httpStatus, remoteURL, message, updatedAt FROM delivery;
                    DROP TABLE delivery;
                    ALTER TABLE delivery_v5 RENAME TO delivery;
                    CREATE INDEX delivery_status ON delivery(runId, sink, status);
                    """)
        }
        migrator.registerMigration("v6: what each item's source was") { db in
            // `SourceStamp`, recorded when an item is processed: `plan` and `run --incremental`
            // compare a feed's items with the last finished run's. Rows of earlier runs have
            // none: their items count as changed. An incremental run keeps the run it compares
            // with (`baseline`, so that its resume compares with it too) and how many items
            // it carried over (`carried`, left out of the time per item `plan` estimates).
            try db.execute(
                sql: """
                    ALTER TABLE item ADD COLUMN sourceSize INTEGER;
                    ALTER TABLE item ADD COLUMN sourceModified DOUBLE;
                    ALTER TABLE item ADD COLUMN sourceHash TEXT;
                    ALTER TABLE item ADD COLUMN sourceVersion TEXT;
                    ALTER TABLE run ADD COLUMN baseline INTEGER;
                    ALTER TABLE run ADD COLUMN carried INTEGER NOT NULL DEFAULT 0;
                    CREATE INDEX delivery_remote ON delivery(sink, remoteURL);
                    """)
        }
        migrator.registerMigration("v7: counters and the place index") { db in
            try db.execute(sql: Self.tallySchema)
            // Where a delivery went, with its run and status: `deliveredOtherwiseSince` finds
            // the deliveries of one run to one place here. On (sink, remoteURL) alone SQLite
            // preferred `delivery_status` (three equal columns to two) and walked every
            // delivery of the run for each item (`plan` grew with the square of the items).
            try db.execute(
                sql: """
                    DROP INDEX delivery_remote;
                    CREATE INDEX delivery_place ON delivery(sink, remoteURL, runId, status);
                    """)
        }
        migrator.registerMigration("v8: listings cut short by an error") { db in
            try db.execute(sql: "ALTER TABLE run ADD COLUMN listingCut INTEGER NOT NULL DEFAULT 0")
        }
        migrator.registerMigration("v9: items handed on whole") { db in
            // An incremental run takes over the rows of an item it carries whole (the item,
            // its outputs and deliveries change run; `HandOn`) instead of copying
            // them: a re-run that changes nothing adds nothing to the file. `carriedFrom` is
            // the run the item was compared with, so that a run compared with it again (the
            // incremental run abandoned, or one of `--limit N`) finds it where it went; a
            // run's `handedOn` counts the items taken from it, which it listed all the same.
            try db.execute(sql: "ALTER TABLE item ADD COLUMN carriedFrom INTEGER")
            try db.execute(sql: "ALTER TABLE run ADD COLUMN handedOn INTEGER NOT NULL DEFAULT 0")
            try db.execute(sql: Self.handOnTriggers)
        }
        migrator.registerMigration("v10: the source's dimensions") { db in
            // The input's width and height as decoded, recorded with its other stamps when the
            // item is processed: a shard's `KEY.json` and manifest carry them.
            try db.execute(
                sql: """
                    ALTER TABLE item ADD COLUMN sourceWidth INTEGER;
                    ALTER TABLE item ADD COLUMN sourceHeight INTEGER;
                    """)
        }
        migrator.registerMigration("v11: the quality a search chose") { db in
            // An output whose quality is searched per image (`"quality": { "ssim": … }`,
            // `maxBytes`) records the quality chosen and the SSIM it reached.
            try db.execute(
                sql: """
                    ALTER TABLE output ADD COLUMN quality INTEGER;
                    ALTER TABLE output ADD COLUMN ssim REAL;
                    """)
        }
        migrator.registerMigration("v12: the format best chose") { db in
            // `"format": "best"` records the format each output came out in; NULL: the
            // output's own format, as the pipeline says.
            try db.execute(sql: "ALTER TABLE output ADD COLUMN format TEXT")
        }
        migrator.registerMigration("v13: fingerprints and duplicates") { db in
            // What each item's first output looks like (`ImageFingerprint`), and `dedup`'s
            // verdicts: `kept` marks the first of its kind, which later items are compared
            // with (by input hash here; by perceptual hash in memory, `DedupJudge`); a
            // duplicate names the item it repeats and how far their hashes lie apart;
            // `placeholder` flags an item made before its bytes were found to be its host's
            // placeholder. `sighting` counts, per host and input hash, the URLs that gave
            // those bytes (with the keys of the first ones, to flag them).
            try db.execute(
                sql: """
                    ALTER TABLE item ADD COLUMN phash TEXT;
                    ALTER TABLE item ADD COLUMN thumbhash TEXT;
                    ALTER TABLE item ADD COLUMN dominant TEXT;
                    ALTER TABLE item ADD COLUMN kept INTEGER;
                    ALTER TABLE item ADD COLUMN duplicateOf TEXT;
                    ALTER TABLE item ADD COLUMN distance INTEGER;
                    ALTER TABLE item ADD COLUMN placeholder INTEGER;
                    CREATE INDEX item_kept_hash ON item(runId, sourceHash, seq) WHERE kept = 1;
                    CREATE INDEX item_placeholder ON item(runId) WHERE placeholder = 1;
                    CREATE TABLE sighting (
                        runId INTEGER NOT NULL REFERENCES run(id) ON DELETE CASCADE,
                        host TEXT NOT NULL,
                        sha256 TEXT NOT NULL,
                        count INTEGER NOT NULL,
                        keys TEXT NOT NULL,
                        PRIMARY KEY (runId, host, sha256)
                    ) WITHOUT ROWID;
                    """)
        }
        return migrator
    }
}

extension RunStore {
    /// A write transaction, with the main file's size and modification time looked at
    /// before and after it. In WAL mode the main file changes only when a checkpoint copies
    /// pages back into it, and checkpoints run inside this process's writes (nothing else
    /// writes while imgpipe holds the state file's lock). So a file otherwise before a write
    /// than after the last one was cut short or written to by another program (`cp` over
    /// it, `dd` into it), even when a later checkpoint makes it as long as before again.
    func write<T>(_ updates: (Database) throws -> T) throws -> T {
        let before = FileStamp(of: path)
        watch.withLock { watch in
            if let last = watch.stamp, before != last { watch.changed = true }
        }
        let result = try database.write(updates)
        let after = FileStamp(of: path)
        watch.withLock { $0.stamp = after }
        return result
    }

    /// True when another program changed the file: found otherwise before one of this
    /// process's writes than after the one before, or now than after the last. A change
    /// during one of this process's writes is not seen here (the write's stamp covers it):
    /// `damage()`, at the end of a run, finds what it broke.
    public var wasChanged: Bool {
        let (changed, last) = watch.withLock { ($0.changed, $0.stamp) }
        if changed { return true }
        if let last, FileStamp(of: path) != last { return true }
        return false
    }

    /// Whether this process changed any row of the file (SQLite's count of the rows its
    /// connection inserted, updated or deleted since it opened, its triggers' included).
    public var changedRows: Bool {
        ((try? database.read { $0.totalChangesCount }) ?? 1) > 0
    }

    /// Copies the log into the file and empties it (`wal_checkpoint(TRUNCATE)`), as closing
    /// the last connection does. Until then a file cut short can read as sound: pages copied
    /// into it before the cut are still read from the log, which the copy then drops.
    public func foldLog() {
        _ = try? database.writeWithoutTransaction { try $0.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
    }

    /// What SQLite's `PRAGMA quick_check` finds wrong with the file, or nil when it is sound.
    /// Asked through a connection of its own: this store's connection keeps pages in its
    /// cache that the file may no longer hold (it was cut short under it).
    public func damage() -> String? {
        do {
            var configuration = Configuration()
            configuration.readonly = true
            let fresh = try DatabaseQueue(path: path, configuration: configuration)
            let lines = try fresh.read { try String.fetchAll($0, sql: "PRAGMA quick_check(5)") }
            return lines == ["ok"] ? nil : lines.joined(separator: "\n").split(separator: "\n").joined(separator: "; ")
        } catch {
            return String(describing: error)
        }
    }
}

/// A state-file problem (cannot open, no run to resume, …).
public struct StoreError: Error, Sendable, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// A file's size and modification time (nanoseconds), or nil when it cannot be read.
struct FileStamp: Equatable, Sendable {
    let size: Int64
    let seconds: Int
    let nanoseconds: Int

    init?(of path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        size = Int64(info.st_size)
        seconds = info.st_mtim.tv_sec
        nanoseconds = info.st_mtim.tv_nsec
    }
}
