import Foundation
import GRDB
import PipelineKit

/// Per-run counters, kept by triggers with every state change (as a shared run keeps
/// its chunks' counters), so that `status`, `resume` of a finished run and `plan`'s
/// look at the last run read a few rows however many items the run has.
///
/// One `tally` row per (run, kind, name, status) with its count `n`:
/// - `item`, name `''`: items by status;
/// - `tier`, status `''`: items by the tier that served their input;
/// - `sink` and `output`: deliveries by sink (or output) and status, leaving out a delivery
///   still `pending` of an item that failed or was skipped (it waits for nothing), as
///   `deliveryCounts` always has.
///
/// The triggers cover every insert and every change of `item.status`, `item.tier` and
/// `delivery.status`, an item's deletion and a delivery's change of run (`handOnTriggers`);
/// imgpipe deletes no delivery row, and an item's row only when another run takes it over.
/// A count may reach 0 and stay as a row: readers leave those out.
extension RunStore {
    static let tallySchema = """
        CREATE TABLE tally (
            runId INTEGER NOT NULL,
            kind TEXT NOT NULL,
            name TEXT NOT NULL,
            status TEXT NOT NULL,
            n INTEGER NOT NULL,
            PRIMARY KEY (runId, kind, name, status)
        ) WITHOUT ROWID;

        CREATE TRIGGER tally_item_insert AFTER INSERT ON item BEGIN
            \(add("NEW.runId", "'item'", "''", "NEW.status", "1"));
            \(add("NEW.runId", "'tier'", "NEW.tier", "''", "1", when: "NEW.tier IS NOT NULL"));
        END;

        CREATE TRIGGER tally_item_tier AFTER UPDATE OF tier ON item WHEN OLD.tier IS NOT NEW.tier BEGIN
            \(add("NEW.runId", "'tier'", "OLD.tier", "''", "-1", when: "OLD.tier IS NOT NULL"));
            \(add("NEW.runId", "'tier'", "NEW.tier", "''", "1", when: "NEW.tier IS NOT NULL"));
        END;

        CREATE TRIGGER tally_item_status AFTER UPDATE OF status ON item WHEN OLD.status != NEW.status BEGIN
            \(add("NEW.runId", "'item'", "''", "OLD.status", "-1"));
            \(add("NEW.runId", "'item'", "''", "NEW.status", "1"));
            \(pendingOfItem("sink"));
            \(pendingOfItem("output"));
        END;

        CREATE TRIGGER tally_delivery_insert AFTER INSERT ON delivery BEGIN
            \(add("NEW.runId", "'sink'", "NEW.sink", "NEW.status", "1", when: counted("NEW")));
            \(add("NEW.runId", "'output'", "NEW.output", "NEW.status", "1", when: counted("NEW")));
        END;

        CREATE TRIGGER tally_delivery_status AFTER UPDATE OF status ON delivery WHEN OLD.status != NEW.status BEGIN
            \(add("NEW.runId", "'sink'", "NEW.sink", "OLD.status", "-1", when: counted("OLD")));
            \(add("NEW.runId", "'output'", "NEW.output", "OLD.status", "-1", when: counted("OLD")));
            \(add("NEW.runId", "'sink'", "NEW.sink", "NEW.status", "1", when: counted("NEW")));
            \(add("NEW.runId", "'output'", "NEW.output", "NEW.status", "1", when: counted("NEW")));
        END;

        INSERT INTO tally SELECT runId, 'item', '', status, count(*) FROM item WHERE true GROUP BY runId, status;
        INSERT INTO tally SELECT runId, 'tier', tier, '', count(*) FROM item WHERE tier IS NOT NULL GROUP BY runId, tier;
        \(backfill("sink"));
        \(backfill("output"));
        """

    /// The counters follow an item, and each of its deliveries, from one run to another
    /// (`HandOn`): the item is inserted anew (counted by its insert trigger) and its
    /// old row deleted, its deliveries change run; each is taken from the old run's counters.
    static let handOnTriggers = """
        CREATE TRIGGER tally_item_delete AFTER DELETE ON item BEGIN
            \(add("OLD.runId", "'item'", "''", "OLD.status", "-1"));
            \(add("OLD.runId", "'tier'", "OLD.tier", "''", "-1", when: "OLD.tier IS NOT NULL"));
        END;

        CREATE TRIGGER tally_delivery_moved AFTER UPDATE OF runId ON delivery WHEN OLD.runId != NEW.runId BEGIN
            \(add("OLD.runId", "'sink'", "OLD.sink", "OLD.status", "-1", when: "OLD.status != 'pending'"));
            \(add("OLD.runId", "'output'", "OLD.output", "OLD.status", "-1", when: "OLD.status != 'pending'"));
            \(add("NEW.runId", "'sink'", "NEW.sink", "NEW.status", "1", when: "NEW.status != 'pending'"));
            \(add("NEW.runId", "'output'", "NEW.output", "NEW.status", "1", when: "NEW.status != 'pending'"));
        END;
        """

    /// Adds `n` to one counter (made at 0 when missing), when `when` holds.
    private static func add(
        _ run: String, _ kind: String, _ name: String, _ status: String, _ n: String,
        when condition: String = "true"
    ) -> String {
        """
        INSERT INTO tally (runId, kind, name, status, n) SELECT \(run), \(kind), \(name), \(status), \(n) WHERE \(condition)
            ON CONFLICT (runId, kind, name, status) DO UPDATE SET n = n + excluded.n
        """
    }

    /// Whether the delivery row `row` (`NEW` or `OLD`) is counted: not pending, or its
    /// item neither failed nor skipped.
    private static func counted(_ row: String) -> String {
        """
        (\(row).status != 'pending' OR COALESCE((SELECT status FROM item WHERE runId = \(row).runId AND key = \(row).itemKey), '')
            NOT IN ('failed', 'skipped'))
        """
    }

    /// An item that starts or stops being failed or skipped takes its pending deliveries
    /// out of the counts, or puts them back.
    private static func pendingOfItem(_ column: String) -> String {
        """
        INSERT INTO tally (runId, kind, name, status, n)
            SELECT d.runId, '\(column)', d.\(column), 'pending',
                   CASE WHEN NEW.status IN ('failed', 'skipped') THEN -count(*) ELSE count(*) END
            FROM delivery d
            WHERE d.runId = NEW.runId AND d.itemKey = NEW.key AND d.status = 'pending'
              AND (OLD.status IN ('failed', 'skipped')) != (NEW.status IN ('failed', 'skipped'))
            GROUP BY d.\(column)
            ON CONFLICT (runId, kind, name, status) DO UPDATE SET n = n + excluded.n
        """
    }

    private static func backfill(_ column: String) -> String {
        """
        INSERT INTO tally (runId, kind, name, status, n)
            SELECT d.runId, '\(column)', d.\(column), d.status, count(*) FROM delivery d
            JOIN item i ON i.runId = d.runId AND i.key = d.itemKey
            WHERE NOT (d.status = 'pending' AND i.status IN ('failed', 'skipped'))
            GROUP BY d.runId, d.\(column), d.status
        """
    }

    /// The nonzero counters of one kind of a run: (name, status, n).
    func tally(runId: Int64, kind: String) throws -> [(name: String, status: String, n: Int)] {
        try read { db in
            try Row.fetchAll(
                db.cachedStatement(sql: "SELECT name, status, n FROM tally WHERE runId = ? AND kind = ? AND n != 0"),
                arguments: [runId, kind]
            ).map { ($0["name"], $0["status"], $0["n"]) }
        }
    }
}
