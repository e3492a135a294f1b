-- One order of the order-entry day, as a pgbench script: pgbench puts each order's own item and
-- quantity into the statements it sends (the captured log holds them, as a real application's does).
-- pgbench's tables stand in for the shop's: pgbench_accounts is the stock, pgbench_history the orders.
\set item random(1, 100000 * :scale)
\set quantity random(1, 5)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance - :quantity WHERE aid = :item;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, :item, :quantity, CURRENT_TIMESTAMP);
END;
