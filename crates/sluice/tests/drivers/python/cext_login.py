"""Every login path of mysql-connector-python's C extension (libmysqlclient, whose default
plugin is caching_sha2_password) through sluice: the initial handshake, COM_CHANGE_USER to
another user and back (re-authentication), a failed COM_CHANGE_USER, COM_RESET_CONNECTION,
and a reconnect. Plain TCP unless TLS=1 in the environment. Prints one line per check; exits
non-zero when anything fails, or when the C extension is not what runs."""

import os
import sys

# The C extension bundles a libssl newer than the system's under the same name: it must be
# loaded before Python's ssl module maps the system one, or it fails to import.
try:
    import _mysql_connector  # noqa: F401
except ImportError as e:
    sys.exit(f"FAIL the C extension of mysql-connector-python cannot be loaded: {e}")
import mysql.connector
from mysql.connector.connection_cext import CMySQLConnection

if not mysql.connector.HAVE_CEXT:
    sys.exit("FAIL mysql.connector.HAVE_CEXT is false")

port = int(os.environ["PORT"])
tls = os.environ.get("TLS") == "1"
opts = dict(host="127.0.0.1", port=port, user="app", password="app", database="test",
            use_pure=False, connection_timeout=20)
if tls:
    opts.update(ssl_disabled=False, ssl_verify_cert=False)
else:
    opts.update(ssl_disabled=True)

c = mysql.connector.connect(**opts)
if not isinstance(c, CMySQLConnection):
    sys.exit(f"FAIL the connection is a {type(c).__name__}, not the C extension's")


def who():
    cur = c.cursor()
    cur.execute("SELECT CURRENT_USER(), DATABASE()")
    row = cur.fetchone()
    cur.close()
    return f"{row[0]} {row[1]}"


cipher = c._cmysql.get_ssl_cipher()
print("tls", "yes" if cipher else "no")
print("connect", who())
c.cmd_change_user(username="other", password="other", database="test")
print("change_user", who())
c.cmd_change_user(username="app", password="app", database="test")
print("change_back", who())
c.cmd_change_user(username="app", password="app", database="test")
print("reauthenticate", who())
try:
    c.cmd_change_user(username="other", password="wrong", database="test")
    print("failed_change_user NO ERROR")
except mysql.connector.Error as e:
    print("failed_change_user", e.errno)
print("after_failure", who())
c.reset_session()
print("reset_session", who())
c.reconnect()
print("reconnect", who())
c.close()
