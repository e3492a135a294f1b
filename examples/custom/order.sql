-- One transaction: take an item from stock and record the order (each session runs it N times).
UPDATE stock SET quantity = quantity - 1 WHERE item = 1 + (random() * 999)::int;
INSERT INTO orders (item, quantity) VALUES (1 + (random() * 999)::int, 1);
