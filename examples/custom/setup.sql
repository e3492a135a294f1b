-- Run once in each fresh instance, before any measurement.
CREATE TABLE stock (item int PRIMARY KEY, quantity int NOT NULL);
INSERT INTO stock SELECT g, 1000000 FROM generate_series(1, 1000) AS g;
CREATE TABLE orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, item int NOT NULL,
                     quantity int NOT NULL, placed timestamptz NOT NULL DEFAULT now());
