-- The shop's database the MariaDB order-entry day was captured on: its stock of 10,000 items and its
-- orders, built in each fresh instance before the replay (the same as the capture's setup).
CREATE TABLE stock (item int PRIMARY KEY, quantity int NOT NULL, filler char(84) NOT NULL DEFAULT '');
CREATE TABLE orders (id bigint AUTO_INCREMENT PRIMARY KEY, item int NOT NULL, quantity int NOT NULL,
                     placed datetime(6) NOT NULL);
INSERT INTO stock (item, quantity) SELECT seq, 1000 FROM seq_1_to_10000;
