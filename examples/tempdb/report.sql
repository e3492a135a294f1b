-- The month-end report, each session's transaction: what each customer bought, line by line (a hash
-- aggregate over every line), and each line's rank in its customer's history (a sort of every line).
-- Both need far more than work_mem (1MB here): they spill to temporary files.
SELECT count(*), sum(total) FROM (SELECT customer, note, sum(amount) AS total FROM sales GROUP BY customer, note) AS t;
SELECT max(r) FROM (SELECT row_number() OVER (PARTITION BY customer ORDER BY note) AS r FROM sales) AS t;
