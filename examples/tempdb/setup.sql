-- A year of sales lines, generated in the server (the same rows every run): 400,000 lines, some 45 MB.
CREATE TABLE sales (id bigint PRIMARY KEY, customer int NOT NULL, item int NOT NULL, amount numeric(10, 2) NOT NULL,
                    note text NOT NULL);
INSERT INTO sales
    SELECT g, (g::bigint * 7919) % 50000, (g::bigint * 104729) % 1000, (g % 9973) / 100.0, md5(g::text)
    FROM generate_series(1, 400000) AS g;
VACUUM ANALYZE sales;
