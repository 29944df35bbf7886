//! Protocol constants: capability flags, status flags, commands, errors.

/// Client/server capability flags.
pub mod cap {
    pub const LONG_PASSWORD: u64 = 1;
    pub const FOUND_ROWS: u64 = 1 << 1;
    pub const LONG_FLAG: u64 = 1 << 2;
    pub const CONNECT_WITH_DB: u64 = 1 << 3;
    pub const NO_SCHEMA: u64 = 1 << 4;
    pub const COMPRESS: u64 = 1 << 5;
    pub const ODBC: u64 = 1 << 6;
    pub const LOCAL_FILES: u64 = 1 << 7;
    pub const IGNORE_SPACE: u64 = 1 << 8;
    pub const PROTOCOL_41: u64 = 1 << 9;
    pub const INTERACTIVE: u64 = 1 << 10;
    pub const SSL: u64 = 1 << 11;
    pub const IGNORE_SIGPIPE: u64 = 1 << 12;
    pub const TRANSACTIONS: u64 = 1 << 13;
    pub const RESERVED: u64 = 1 << 14;
    pub const SECURE_CONNECTION: u64 = 1 << 15;
    pub const MULTI_STATEMENTS: u64 = 1 << 16;
    pub const MULTI_RESULTS: u64 = 1 << 17;
    pub const PS_MULTI_RESULTS: u64 = 1 << 18;
    pub const PLUGIN_AUTH: u64 = 1 << 19;
    pub const CONNECT_ATTRS: u64 = 1 << 20;
    pub const PLUGIN_AUTH_LENENC_CLIENT_DATA: u64 = 1 << 21;
    pub const CAN_HANDLE_EXPIRED_PASSWORDS: u64 = 1 << 22;
    pub const SESSION_TRACK: u64 = 1 << 23;
    pub const DEPRECATE_EOF: u64 = 1 << 24;
    pub const QUERY_ATTRIBUTES: u64 = 1 << 27;
}

/// Server status flags (OK and EOF packets).
pub mod status {
    pub const IN_TRANS: u16 = 1;
    pub const AUTOCOMMIT: u16 = 1 << 1;
    pub const MORE_RESULTS_EXISTS: u16 = 1 << 3;
    pub const NO_GOOD_INDEX_USED: u16 = 1 << 4;
    pub const NO_INDEX_USED: u16 = 1 << 5;
    pub const CURSOR_EXISTS: u16 = 1 << 6;
    pub const LAST_ROW_SENT: u16 = 1 << 7;
    pub const DB_DROPPED: u16 = 1 << 8;
    pub const NO_BACKSLASH_ESCAPES: u16 = 1 << 9;
    pub const METADATA_CHANGED: u16 = 1 << 10;
    pub const QUERY_WAS_SLOW: u16 = 1 << 11;
    pub const PS_OUT_PARAMS: u16 = 1 << 12;
    pub const IN_TRANS_READONLY: u16 = 1 << 13;
    pub const SESSION_STATE_CHANGED: u16 = 1 << 14;
}

/// Command bytes.
pub mod com {
    pub const SLEEP: u8 = 0x00;
    pub const QUIT: u8 = 0x01;
    pub const INIT_DB: u8 = 0x02;
    pub const QUERY: u8 = 0x03;
    pub const FIELD_LIST: u8 = 0x04;
    pub const CREATE_DB: u8 = 0x05;
    pub const DROP_DB: u8 = 0x06;
    pub const REFRESH: u8 = 0x07;
    pub const SHUTDOWN: u8 = 0x08;
    pub const STATISTICS: u8 = 0x09;
    pub const PROCESS_INFO: u8 = 0x0a;
    pub const CONNECT: u8 = 0x0b;
    pub const PROCESS_KILL: u8 = 0x0c;
    pub const DEBUG: u8 = 0x0d;
    pub const PING: u8 = 0x0e;
    pub const CHANGE_USER: u8 = 0x11;
    pub const BINLOG_DUMP: u8 = 0x12;
    pub const STMT_PREPARE: u8 = 0x16;
    pub const STMT_EXECUTE: u8 = 0x17;
    pub const STMT_SEND_LONG_DATA: u8 = 0x18;
    pub const STMT_CLOSE: u8 = 0x19;
    pub const STMT_RESET: u8 = 0x1a;
    pub const SET_OPTION: u8 = 0x1b;
    pub const STMT_FETCH: u8 = 0x1c;
    pub const RESET_CONNECTION: u8 = 0x1f;
    pub const STMT_BULK_EXECUTE: u8 = 0xfa;
}

/// Session-state tracker entry types (OK packet).
pub mod track {
    pub const SYSTEM_VARIABLES: u8 = 0;
    pub const SCHEMA: u8 = 1;
    pub const STATE_CHANGE: u8 = 2;
    pub const GTIDS: u8 = 3;
    pub const TRANSACTION_CHARACTERISTICS: u8 = 4;
    pub const TRANSACTION_STATE: u8 = 5;
}

/// Error codes the proxy itself sends.
pub mod err {
    /// ER_CON_COUNT_ERROR: too many connections.
    pub const TOO_MANY_CONNECTIONS: u16 = 1040;
    /// ER_OUT_OF_RESOURCES: a request does not fit in `[proxy] max_request_memory` now.
    pub const OUT_OF_RESOURCES: u16 = 1041;
    /// ER_HANDSHAKE_ERROR: bad handshake.
    pub const HANDSHAKE: u16 = 1043;
    /// ER_DBACCESS_DENIED_ERROR.
    pub const DB_ACCESS_DENIED: u16 = 1044;
    /// ER_ACCESS_DENIED_ERROR.
    pub const ACCESS_DENIED: u16 = 1045;
    /// ER_NO_DB_ERROR: no database selected.
    pub const NO_DB: u16 = 1046;
    /// ER_UNKNOWN_COM_ERROR.
    pub const UNKNOWN_COM: u16 = 1047;
    /// ER_BAD_DB_ERROR.
    pub const BAD_DB: u16 = 1049;
    /// ER_NET_PACKETS_OUT_OF_ORDER.
    pub const PACKETS_OUT_OF_ORDER: u16 = 1156;
    /// ER_HOST_IS_BLOCKED: the client's address is blocked after repeated failures.
    pub const HOST_IS_BLOCKED: u16 = 1129;
    /// ER_TOO_MANY_USER_CONNECTIONS: the user's `max_connections`.
    pub const TOO_MANY_USER_CONNECTIONS: u16 = 1226;
    /// ER_NET_PACKET_TOO_LARGE.
    pub const PACKET_TOO_LARGE: u16 = 1153;
    /// ER_NET_READ_ERROR / malformed packet.
    pub const MALFORMED_PACKET: u16 = 1835;
    /// ER_NOT_ALLOWED_COMMAND (LOAD DATA LOCAL without CLIENT_LOCAL_FILES).
    pub const NOT_ALLOWED_COMMAND: u16 = 1148;
    /// ER_UNKNOWN_STMT_HANDLER.
    pub const UNKNOWN_STMT_HANDLER: u16 = 1243;
    /// ER_NO_SUCH_THREAD.
    pub const NO_SUCH_THREAD: u16 = 1094;
    /// ER_KILL_DENIED_ERROR.
    pub const KILL_DENIED: u16 = 1095;
    /// ER_NOT_SUPPORTED_YET.
    pub const NOT_SUPPORTED: u16 = 1235;
    /// ER_SERVER_SHUTDOWN (SQLSTATE 08S01): the backend connection broke during the
    /// statement; its outcome is unknown. This is what a client sees when its server goes
    /// away under a statement. (Not CR_SERVER_LOST 2013: that is a client-library code, and
    /// libmariadb reports an ERR packet carrying 2003/2006/2013 as a malformed packet.)
    pub const BACKEND_LOST: u16 = 1053;
    /// ER_LOCK_DEADLOCK: the transaction was rolled back; restart it.
    pub const LOCK_DEADLOCK: u16 = 1213;
    /// sluice: no backend connection could be had (queue timeout, no server).
    pub const NO_BACKEND: u16 = 9001;
    /// sluice: a routing hint or rule named an unknown hostgroup.
    pub const ROUTING: u16 = 9002;
    /// sluice: the session's state cannot be carried to another connection.
    pub const SESSION_STATE: u16 = 9003;
    /// ER_MAX_PREPARED_STMT_COUNT_REACHED.
    pub const MAX_PREPARED_STMT_COUNT: u16 = 1461;
}

/// `mysql_native_password`.
pub const NATIVE_PASSWORD: &str = "mysql_native_password";
/// `caching_sha2_password`.
pub const CACHING_SHA2_PASSWORD: &str = "caching_sha2_password";

/// Largest payload of one physical packet; a payload this long continues in the next packet.
pub const MAX_PAYLOAD: usize = 0xff_ff_ff;
