"""One probe of bench/run-longtext.sh: while another process sends three statements of
SIZE bytes through PORT, a client of its own sends `SELECT 1` every 2 ms and times each.
Prints one line: the long statements' mean time, and the probe's count, p99 and max.

Usage: longtext_probe.py pg|my PORT SIZE literal|inlist [pinned]
  literal: SELECT length('xxx...'); inlist: SELECT 1 WHERE 1 IN (1000000, 1000001, ...)
  pinned (MySQL): the probe opens a transaction first, so it keeps a server connection of its
  own instead of taking, from the pool, the one the long statement just gave back.
"""
import multiprocessing as mp
import sys
import time

PROTO, PORT, SIZE, KIND = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
PINNED = len(sys.argv) > 5 and sys.argv[5] == "pinned"


def connect(pin=False):
    if PROTO == "pg":
        import psycopg
        c = psycopg.connect(f"host=127.0.0.1 port={PORT} user=app password=app dbname=postgres",
                            autocommit=True)
        return lambda q: c.execute(q).fetchall()
    import pymysql
    c = pymysql.connect(host="127.0.0.1", port=PORT, user="app", password="app",
                        autocommit=True, max_allowed_packet=256 << 20)
    cur = c.cursor()
    if pin:
        cur.execute("BEGIN")

    def run(q):
        cur.execute(q)
        return cur.fetchall()
    return run


def long_statements(done):
    run = connect()
    if KIND == "literal":
        sql = "SELECT length('" + "x" * SIZE + "')"
    else:
        items = ",".join(str(1000000 + i) for i in range(SIZE // 8))
        sql = "SELECT 1 " + ("FROM DUAL " if PROTO == "my" else "") + "WHERE 1 IN (" + items + ")"
    if PROTO == "pg":
        sql = sql.encode()
    start = time.perf_counter()
    for _ in range(3):
        run(sql)
    done.put((time.perf_counter() - start) / 3)


if __name__ == "__main__":
    probe = connect(PINNED)
    done = mp.Queue()
    sender = mp.Process(target=long_statements, args=(done,))
    sender.start()
    times = []
    # Bounded: the sender's three statements, and at most 10 minutes.
    deadline = time.monotonic() + 600
    while sender.is_alive() and time.monotonic() < deadline:
        t = time.perf_counter()
        probe("SELECT 1")
        times.append(time.perf_counter() - t)
        time.sleep(0.002)
    sender.join(5)
    mean = done.get(timeout=5)
    times.sort()
    print(f"{PROTO} {KIND:7} {'pinned ' if PINNED else ''}long {mean * 1000:6.0f} ms | probe n={len(times):5} "
          f"p99 {times[int(len(times) * 0.99)] * 1000:6.1f} ms max {times[-1] * 1000:6.1f} ms")
