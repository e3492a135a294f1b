-- One order of the order-entry day: an item taken from the stock and the order written, one transaction.
UPDATE stock SET quantity = quantity - 1 WHERE item = 1 + FLOOR(RAND() * 10000);
INSERT INTO orders (item, quantity, placed) VALUES (1 + FLOOR(RAND() * 10000), 1, NOW(6));
