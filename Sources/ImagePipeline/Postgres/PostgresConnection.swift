import CPostgres
import Foundation
import PipelineKit
import Synchronization

/// A failure from PostgreSQL or from reaching it, with the server's SQLSTATE when it gave one.
public struct PostgresError: Error, CustomStringConvertible, Sendable {
    /// Five characters (`40001`, `23505`, …); nil when the connection itself failed.
    public let sqlState: String?
    public let message: String
    /// True when the connection was lost or could not be made: the statement may be
    /// replayed on a new connection (every batch the store sends is idempotent).
    public var isConnectionLost: Bool { sqlState == nil || sqlState!.hasPrefix("08") || sqlState == "57P01" }

    public var description: String {
        sqlState.map { "PostgreSQL error \($0): \(message)" } ?? "PostgreSQL: \(message)"
    }
}

/// The rows a statement returned, as text (libpq's text format): a column by name or index.
public struct PostgresRows: Sendable {
    public let columns: [String]
    public let rows: [[String?]]
    /// Rows the statement changed (`UPDATE`, `INSERT`, `DELETE`), from its command tag.
    public let affected: Int

    public var count: Int { rows.count }
    public var first: PostgresRow? { rows.first.map { PostgresRow(columns: columns, values: $0) } }
    public var all: [PostgresRow] { rows.map { PostgresRow(columns: columns, values: $0) } }
}

public struct PostgresRow: Sendable {
    let columns: [String]
    let values: [String?]

    public subscript(_ name: String) -> String? {
        guard let index = columns.firstIndex(of: name) else { return nil }
        return values[index]
    }

    public func int(_ name: String) -> Int64? { self[name].flatMap { Int64($0) } }
    public func bool(_ name: String) -> Bool { self[name] == "t" }
}

/// One blocking libpq connection, used by one thread at a time (the store's callers hold
/// their own). Reconnects with back-off when the server went away; a statement that was
/// cut off by a lost connection is replayed once on the new one only where the caller
/// says it is idempotent (`transaction` bodies are, by the store's design).
///
/// Every session sets `idle_in_transaction_session_timeout`, so a client stalled inside a
/// transaction (stopped, partitioned) cannot hold row locks for longer than that; nothing
/// here holds a transaction open across a network call of its own.
///
/// `abandon()` is the one call another thread may make: it cuts short the call under way
/// (its socket shut down) and makes every later one fail at once, without reconnecting.
// @unchecked: libpq's handle is used by one thread at a time (callers own a connection).
public final class PostgresConnection: @unchecked Sendable {
    /// The connection string as given (a `postgres://` URL); never printed: see `StateLocation`.
    let url: String
    private var handle: OpaquePointer?
    let idleInTransactionTimeout: Int
    /// A duplicate of the open connection's socket (-1 between connections) and whether the
    /// connection was abandoned: the only state another thread touches (`abandon()`). A
    /// duplicate, closed only here, because libpq closes its own descriptor whenever a read
    /// fails: the number kept could by then be another file's, and shutting it down would
    /// cut an unrelated socket. Shutting the duplicate down ends the connection all the same.
    private let shared = Mutex<(socket: Int32, abandoned: Bool)>((-1, false))
    /// Reconnect attempts before a lost connection is reported (back-off 0.2 s doubling to 2 s).
    let reconnectAttempts = 6

    public init(url: String, idleInTransactionTimeoutSeconds: Int = 60) throws {
        // libpq would read such a URL its own way and quote pieces of the password back.
        if let problem = StateLocation.unencodedPassword(in: url) { throw PostgresError(sqlState: nil, message: problem) }
        self.url = url
        idleInTransactionTimeout = idleInTransactionTimeoutSeconds
        try connect()
    }

    deinit { if let handle { finish(handle) } }

    public func close() {
        if let handle { finish(handle) }
        handle = nil
    }

    private func finish(_ connection: OpaquePointer) {
        shared.withLock { state in
            if state.socket >= 0 { Glibc.close(state.socket) }
            state.socket = -1
        }
        PQfinish(connection)
    }

    /// Gives this connection up, from any thread: a call under way on it fails now, as a
    /// lost connection (its socket is shut down, so libpq's wait ends at once instead of at
    /// TCP's timeouts), and every later call fails without trying to connect again. For a
    /// worker that stopped because the database was out of reach for a lease: without it,
    /// a call into a cut network waited for `tcp_user_timeout`, then for six reconnects of
    /// up to `connect_timeout` each, and only the hard stop (`SharedWorker.Options.onStuck`)
    /// ended the process.
    public func abandon() {
        shared.withLock { state in
            state.abandoned = true
            if state.socket >= 0 { _ = shutdown(state.socket, Int32(SHUT_RDWR)) }
        }
    }

    static let givenUp = PostgresError(sqlState: nil, message: "connection given up: the database was out of reach")

    private func checkAbandoned() throws {
        if shared.withLock({ $0.abandoned }) {
            throw Self.givenUp
        }
    }

    /// Added to every connection (the URL's own settings come first and these override
    /// them): a server that stops answering fails a connect in 5 s and a call in about 10 s
    /// instead of the kernel's minutes, so a worker notices a lost database within its lease.
    static let timeouts = [
        ("connect_timeout", "5"), ("keepalives", "1"), ("keepalives_idle", "5"),
        ("keepalives_interval", "2"), ("keepalives_count", "3"), ("tcp_user_timeout", "10000"),
    ]

    private func connect() throws {
        if let handle { finish(handle) }
        handle = nil
        try checkAbandoned()
        // `dbname` first with expand_dbname = 1: the URL is read as the whole connection string.
        let pairs = [("dbname", url)] + Self.timeouts
        let keywords = pairs.map { strdup($0.0) } + [nil]
        let values = pairs.map { strdup($0.1) } + [nil]
        defer { for pointer in keywords + values { free(pointer) } }
        let connection = keywords.map { $0.map { UnsafePointer($0) } }.withUnsafeBufferPointer { keys in
            values.map { $0.map { UnsafePointer($0) } }.withUnsafeBufferPointer { vals in
                PQconnectdbParams(keys.baseAddress, vals.baseAddress, 1)
            }
        }
        handle = connection
        guard let connection, PQstatus(connection) == CONNECTION_OK else {
            let text = connection.map { String(cString: PQerrorMessage($0)) } ?? "out of memory"
            throw PostgresError(sqlState: nil, message: text.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        let published = shared.withLock { state in
            if !state.abandoned { state.socket = fcntl(PQsocket(connection), F_DUPFD_CLOEXEC, 0) }
            return !state.abandoned
        }
        guard published else { throw Self.givenUp }
        // Notices (NOTICE: relation already exists, …) are not printed to standard error.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
        _ = try run("SET idle_in_transaction_session_timeout = \(idleInTransactionTimeout * 1000)", [])
        // A statement waits for a row lock at most this long (a rescue never waits: it skips
        // locked rows); then it fails with SQLSTATE 55P03, which is not replayed here: a
        // worker's claims and end-of-run checks try again (`ChunkFeed`), a recorder's write
        // stays queued for its next turn.
        _ = try run("SET lock_timeout = \(max(1000, idleInTransactionTimeout * 1000 / 2))", [])
        _ = try run("SET application_name = 'imgpipe'", [])
    }

    /// Connects again after a lost connection, waiting 0.2 s, 0.4 s, … between tries: at
    /// most 2 s, and at most a quarter of the session's transaction limit (a worker's is a
    /// third of its lease). With a short lease, a worker's heartbeat then tries again every
    /// half second at most (an attack saw a 2 s outage under a 3 s lease cost the leases:
    /// the doubled waits had reached 1.6 s, and the first heartbeat back came too late).
    private func reconnect() throws {
        var delay = 0.2
        let longest = min(2, max(0.2, Double(idleInTransactionTimeout) / 4))
        var last: Error = PostgresError(sqlState: nil, message: "connection lost")
        for _ in 0..<reconnectAttempts {
            do { return try connect() } catch { last = error }
            try checkAbandoned()
            Thread.sleep(forTimeInterval: delay)
            delay = min(delay * 2, longest)
        }
        throw last
    }

    /// Runs one statement with `$1, $2, …` parameters sent as text (never spliced into SQL).
    /// Outside a transaction, a statement cut off by a lost connection is sent again on a new
    /// connection when `idempotent` (the default: the store's single statements are).
    @discardableResult
    public func execute(_ sql: String, _ parameters: [String?] = [], idempotent: Bool = true) throws -> PostgresRows {
        try checkAbandoned()
        if handle == nil || PQstatus(handle) != CONNECTION_OK { try reconnect() }
        do {
            return try run(sql, parameters)
        } catch let error as PostgresError where error.isConnectionLost && idempotent && !inTransaction {
            try reconnect()
            return try run(sql, parameters)
        }
    }

    private var inTransaction = false

    /// Runs `body` in one transaction (committed when it returns, rolled back when it
    /// throws). A transaction cut off by a lost connection is run again from its start on a
    /// new connection, up to twice: `body` must be safe to replay (the store's are: every
    /// write checks the state it expects).
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        var replays = 0
        while true {
            do {
                try execute("BEGIN")
                inTransaction = true
                defer { inTransaction = false }
                do {
                    let value = try body()
                    try run("COMMIT", [])
                    return value
                } catch {
                    _ = try? run("ROLLBACK", [])
                    throw error
                }
            } catch let error as PostgresError where error.isConnectionLost && replays < 2 {
                replays += 1
                try reconnect()
            }
        }
    }

    @discardableResult
    private func run(_ sql: String, _ parameters: [String?]) throws -> PostgresRows {
        let result = withParameterPointers(parameters) { values in
            PQexecParams(handle, sql, Int32(parameters.count), nil, values, nil, nil, 0)
        }
        guard let result else {
            try checkAbandoned()
            throw PostgresError(sqlState: nil, message: String(cString: PQerrorMessage(handle)))
        }
        defer { PQclear(result) }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
            let columnCount = Int(PQnfields(result))
            let columns = (0..<columnCount).map { String(cString: PQfname(result, Int32($0))) }
            let rows = (0..<Int(PQntuples(result))).map { row in
                (0..<columnCount).map { column -> String? in
                    PQgetisnull(result, Int32(row), Int32(column)) == 1
                        ? nil : String(cString: PQgetvalue(result, Int32(row), Int32(column)))
                }
            }
            let affected = Int(String(cString: PQcmdTuples(result))) ?? 0
            return PostgresRows(columns: columns, rows: rows, affected: affected)
        default:
            let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
            let message = String(cString: PQresultErrorMessage(result)).trimmingCharacters(in: .whitespacesAndNewlines)
            // A connection that broke mid-statement reports a fatal error without a SQLSTATE;
            // one given up says so, not libpq's guess ("the server terminated abnormally").
            let lost = PQstatus(handle) != CONNECTION_OK
            if lost { try checkAbandoned() }
            throw PostgresError(sqlState: lost ? nil : state, message: message)
        }
    }

    /// C strings of `parameters`. PostgreSQL's text holds no NUL character (and a C string
    /// would end there, cutting an array literal short so that every retry failed the same
    /// way): a NUL, which a third-party feed's JSON can carry, becomes U+FFFD.
    private func withParameterPointers<R>(_ parameters: [String?], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
        let owned: [UnsafeMutablePointer<CChar>?] = parameters.map { parameter in
            parameter.map { strdup($0.contains("\u{0}") ? $0.replacingOccurrences(of: "\u{0}", with: "\u{FFFD}") : $0) }
        }
        defer { for pointer in owned { free(pointer) } }
        return body(owned.map { $0.map { UnsafePointer($0) } })
    }
}
