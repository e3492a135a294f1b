-- The database the order-entry day was captured on, built as `pgbench -i -s 1` builds it (its tables,
-- its rows generated in the server, its keys): run in each fresh instance before the replay.
CREATE TABLE pgbench_branches (bid int NOT NULL, bbalance int, filler char(88)) WITH (fillfactor = 100);
CREATE TABLE pgbench_tellers (tid int NOT NULL, bid int, tbalance int, filler char(84)) WITH (fillfactor = 100);
CREATE TABLE pgbench_accounts (aid int NOT NULL, bid int, abalance int, filler char(84)) WITH (fillfactor = 100);
CREATE TABLE pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22));
INSERT INTO pgbench_branches (bid, bbalance) SELECT bid, 0 FROM generate_series(1, 1) AS bid;
INSERT INTO pgbench_tellers (tid, bid, tbalance) SELECT tid, (tid - 1) / 10 + 1, 0 FROM generate_series(1, 10) AS tid;
INSERT INTO pgbench_accounts (aid, bid, abalance, filler)
    SELECT aid, (aid - 1) / 100000 + 1, 0, '' FROM generate_series(1, 100000) AS aid;
VACUUM ANALYZE pgbench_branches, pgbench_tellers, pgbench_accounts, pgbench_history;
ALTER TABLE pgbench_branches ADD PRIMARY KEY (bid);
ALTER TABLE pgbench_tellers ADD PRIMARY KEY (tid);
ALTER TABLE pgbench_accounts ADD PRIMARY KEY (aid);
