#!/usr/bin/env python3
"""What deleting a top-level comment costs in SQLite at 200,000 comments: the old single
`DELETE ... WHERE id = ? OR parent_id = ?` without an index on `parent_id` (a scan under the one
write lock), the same with the index, and hmdp's two statements. The table is the service's
`tb_blog_comments`; each delete is timed inside its `BEGIN IMMEDIATE` transaction.

    python3 crates/hmdp-bench/scripts/comment-delete.py
"""
import os, random, sqlite3, tempfile, time

path = os.path.join(tempfile.mkdtemp(), "comments.db")
c=sqlite3.connect(path, isolation_level=None)
c.execute("PRAGMA journal_mode=WAL"); c.execute("PRAGMA synchronous=NORMAL")
c.execute("""CREATE TABLE tb_blog_comments (id INTEGER PRIMARY KEY AUTOINCREMENT, user_id INTEGER NOT NULL, blog_id INTEGER NOT NULL,
 parent_id INTEGER NOT NULL, answer_id INTEGER NOT NULL, content TEXT NOT NULL, liked INTEGER, status INTEGER, create_time TEXT, update_time TEXT)""")
c.execute("CREATE INDEX idx_blog_comments_blog ON tb_blog_comments (blog_id)")
N=200_000
rows=[]
for i in range(1,N+1):
    top = (i % 5 == 1)
    parent = 0 if top else (i - (i-1)%5)
    rows.append((i, i%1000+1, (i//100)%500+1, parent, 0, "comment text %d"%i, 0, 0, "2024-01-01 00:00:00","2024-01-01 00:00:00"))
c.execute("BEGIN"); c.executemany("INSERT INTO tb_blog_comments VALUES (?,?,?,?,?,?,?,?,?,?)", rows); c.execute("COMMIT")
def run(label, stmts, ids):
    ts=[]
    for tid in ids:
        t=time.perf_counter()
        c.execute("BEGIN IMMEDIATE")
        for s,n in stmts:
            c.execute(s, (tid,)*n)
        ts.append(time.perf_counter()-t)
        c.execute("COMMIT")
    ts.sort()
    print(f"{label}: median {ts[len(ts)//2]*1000:.2f} ms, max {ts[-1]*1000:.2f} ms over {len(ts)} deletes")
old=[("DELETE FROM tb_blog_comments WHERE id = ? OR parent_id = ?",2)]
new=[("DELETE FROM tb_blog_comments WHERE id = ?",1),("DELETE FROM tb_blog_comments WHERE parent_id = ?",1)]
tops=[i for i in range(1,N,5)]
random.seed(1); random.shuffle(tops)
print("plan old, no index:", c.execute("EXPLAIN QUERY PLAN "+old[0][0], (1,1)).fetchall())
run("OR delete, no parent index", old, tops[:30])
c.execute("CREATE INDEX idx_blog_comments_parent ON tb_blog_comments (parent_id)")
print("plan old, with index:", c.execute("EXPLAIN QUERY PLAN "+old[0][0], (1,1)).fetchall())
print("plan new:", c.execute("EXPLAIN QUERY PLAN "+new[1][0], (1,)).fetchall())
run("OR delete, with parent index", old, tops[30:60])
run("two deletes, with parent index", new, tops[60:90])
print(sqlite3.sqlite_version)
