//! Protocol constants: capability flags, status flags, commands, errors.

/// Client/server capability flags.
pub mod cap {
    /// The `CLIENT_LONG_PASSWORD` capability flag.
    pub const LONG_PASSWORD: u64 = 1;
    /// The `CLIENT_FOUND_ROWS` capability flag.
    pub const FOUND_ROWS: u64 = 1 << 1;
    /// The `CLIENT_LONG_FLAG` capability flag.
    pub const LONG_FLAG: u64 = 1 << 2;
    /// The `CLIENT_CONNECT_WITH_DB` capability flag.
    pub const CONNECT_WITH_DB: u64 = 1 << 3;
    /// The `CLIENT_NO_SCHEMA` capability flag.
    pub const NO_SCHEMA: u64 = 1 << 4;
    /// The `CLIENT_COMPRESS` capability flag.
    pub const COMPRESS: u64 = 1 << 5;
    /// The `CLIENT_ODBC` capability flag.
    pub const ODBC: u64 = 1 << 6;
    /// The `CLIENT_LOCAL_FILES` capability flag.
    pub const LOCAL_FILES: u64 = 1 << 7;
    /// The `CLIENT_IGNORE_SPACE` capability flag.
    pub const IGNORE_SPACE: u64 = 1 << 8;
    /// The `CLIENT_PROTOCOL_41` capability flag.
    pub const PROTOCOL_41: u64 = 1 << 9;
    /// The `CLIENT_INTERACTIVE` capability flag.
    pub const INTERACTIVE: u64 = 1 << 10;
    /// The `CLIENT_SSL` capability flag.
    pub const SSL: u64 = 1 << 11;
    /// The `CLIENT_IGNORE_SIGPIPE` capability flag.
    pub const IGNORE_SIGPIPE: u64 = 1 << 12;
    /// The `CLIENT_TRANSACTIONS` capability flag.
    pub const TRANSACTIONS: u64 = 1 << 13;
    /// The `CLIENT_RESERVED` capability flag.
    pub const RESERVED: u64 = 1 << 14;
    /// The `CLIENT_SECURE_CONNECTION` capability flag.
    pub const SECURE_CONNECTION: u64 = 1 << 15;
    /// The `CLIENT_MULTI_STATEMENTS` capability flag.
    pub const MULTI_STATEMENTS: u64 = 1 << 16;
    /// The `CLIENT_MULTI_RESULTS` capability flag.
    pub const MULTI_RESULTS: u64 = 1 << 17;
    /// The `CLIENT_PS_MULTI_RESULTS` capability flag.
    pub const PS_MULTI_RESULTS: u64 = 1 << 18;
    /// The `CLIENT_PLUGIN_AUTH` capability flag.
    pub const PLUGIN_AUTH: u64 = 1 << 19;
    /// The `CLIENT_CONNECT_ATTRS` capability flag.
    pub const CONNECT_ATTRS: u64 = 1 << 20;
    /// The `CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA` capability flag.
    pub const PLUGIN_AUTH_LENENC_CLIENT_DATA: u64 = 1 << 21;
    /// The `CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS` capability flag.
    pub const CAN_HANDLE_EXPIRED_PASSWORDS: u64 = 1 << 22;
    /// The `CLIENT_SESSION_TRACK` capability flag.
    pub const SESSION_TRACK: u64 = 1 << 23;
    /// The `CLIENT_DEPRECATE_EOF` capability flag.
    pub const DEPRECATE_EOF: u64 = 1 << 24;
    /// The `CLIENT_QUERY_ATTRIBUTES` capability flag.
    pub const QUERY_ATTRIBUTES: u64 = 1 << 27;
}

/// Server status flags (OK and EOF packets).
pub mod status {
    /// The `SERVER_STATUS_IN_TRANS` flag.
    pub const IN_TRANS: u16 = 1;
    /// The `SERVER_STATUS_AUTOCOMMIT` flag.
    pub const AUTOCOMMIT: u16 = 1 << 1;
    /// The `SERVER_STATUS_MORE_RESULTS_EXISTS` flag.
    pub const MORE_RESULTS_EXISTS: u16 = 1 << 3;
    /// The `SERVER_STATUS_NO_GOOD_INDEX_USED` flag.
    pub const NO_GOOD_INDEX_USED: u16 = 1 << 4;
    /// The `SERVER_STATUS_NO_INDEX_USED` flag.
    pub const NO_INDEX_USED: u16 = 1 << 5;
    /// The `SERVER_STATUS_CURSOR_EXISTS` flag.
    pub const CURSOR_EXISTS: u16 = 1 << 6;
    /// The `SERVER_STATUS_LAST_ROW_SENT` flag.
    pub const LAST_ROW_SENT: u16 = 1 << 7;
    /// The `SERVER_STATUS_DB_DROPPED` flag.
    pub const DB_DROPPED: u16 = 1 << 8;
    /// The `SERVER_STATUS_NO_BACKSLASH_ESCAPES` flag.
    pub const NO_BACKSLASH_ESCAPES: u16 = 1 << 9;
    /// The `SERVER_STATUS_METADATA_CHANGED` flag.
    pub const METADATA_CHANGED: u16 = 1 << 10;
    /// The `SERVER_STATUS_QUERY_WAS_SLOW` flag.
    pub const QUERY_WAS_SLOW: u16 = 1 << 11;
    /// The `SERVER_STATUS_PS_OUT_PARAMS` flag.
    pub const PS_OUT_PARAMS: u16 = 1 << 12;
    /// The `SERVER_STATUS_IN_TRANS_READONLY` flag.
    pub const IN_TRANS_READONLY: u16 = 1 << 13;
    /// The `SERVER_STATUS_SESSION_STATE_CHANGED` flag.
    pub const SESSION_STATE_CHANGED: u16 = 1 << 14;
}

/// Command bytes.
pub mod com {
    /// The `COM_SLEEP` command byte.
    pub const SLEEP: u8 = 0x00;
    /// The `COM_QUIT` command byte.
    pub const QUIT: u8 = 0x01;
    /// The `COM_INIT_DB` command byte.
    pub const INIT_DB: u8 = 0x02;
    /// The `COM_QUERY` command byte.
    pub const QUERY: u8 = 0x03;
    /// The `COM_FIELD_LIST` command byte.
    pub const FIELD_LIST: u8 = 0x04;
    /// The `COM_CREATE_DB` command byte.
    pub const CREATE_DB: u8 = 0x05;
    /// The `COM_DROP_DB` command byte.
    pub const DROP_DB: u8 = 0x06;
    /// The `COM_REFRESH` command byte.
    pub const REFRESH: u8 = 0x07;
    /// The `COM_SHUTDOWN` command byte.
    pub const SHUTDOWN: u8 = 0x08;
    /// The `COM_STATISTICS` command byte.
    pub const STATISTICS: u8 = 0x09;
    /// The `COM_PROCESS_INFO` command byte.
    pub const PROCESS_INFO: u8 = 0x0a;
    /// The `COM_CONNECT` command byte.
    pub const CONNECT: u8 = 0x0b;
    /// The `COM_PROCESS_KILL` command byte.
    pub const PROCESS_KILL: u8 = 0x0c;
    /// The `COM_DEBUG` command byte.
    pub const DEBUG: u8 = 0x0d;
    /// The `COM_PING` command byte.
    pub const PING: u8 = 0x0e;
    /// The `COM_CHANGE_USER` command byte.
    pub const CHANGE_USER: u8 = 0x11;
    /// The `COM_BINLOG_DUMP` command byte.
    pub const BINLOG_DUMP: u8 = 0x12;
    /// The `COM_STMT_PREPARE` command byte.
    pub const STMT_PREPARE: u8 = 0x16;
    /// The `COM_STMT_EXECUTE` command byte.
    pub const STMT_EXECUTE: u8 = 0x17;
    /// The `COM_STMT_SEND_LONG_DATA` command byte.
    pub const STMT_SEND_LONG_DATA: u8 = 0x18;
    /// The `COM_STMT_CLOSE` command byte.
    pub const STMT_CLOSE: u8 = 0x19;
    /// The `COM_STMT_RESET` command byte.
    pub const STMT_RESET: u8 = 0x1a;
    /// The `COM_SET_OPTION` command byte.
    pub const SET_OPTION: u8 = 0x1b;
    /// The `COM_STMT_FETCH` command byte.
    pub const STMT_FETCH: u8 = 0x1c;
    /// The `COM_RESET_CONNECTION` command byte.
    pub const RESET_CONNECTION: u8 = 0x1f;
    /// The `COM_STMT_BULK_EXECUTE` command byte.
    pub const STMT_BULK_EXECUTE: u8 = 0xfa;
}

/// Session-state tracker entry types (OK packet).
pub mod track {
    /// `SYSTEM_VARIABLES`.
    pub const SYSTEM_VARIABLES: u8 = 0;
    /// `SCHEMA`.
    pub const SCHEMA: u8 = 1;
    /// `STATE_CHANGE`.
    pub const STATE_CHANGE: u8 = 2;
    /// `GTIDS`.
    pub const GTIDS: u8 = 3;
    /// `TRANSACTION_CHARACTERISTICS`.
    pub const TRANSACTION_CHARACTERISTICS: u8 = 4;
    /// `TRANSACTION_STATE`.
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
