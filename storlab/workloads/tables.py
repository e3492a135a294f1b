"""The seeds' tables, in each engine's DDL.

Seed 000's row: a 16-byte key and 160 bytes of defaults (`c2 … c6`), clustered on the key: a random
GUID there (random-insert), an ever-increasing integer in seed 001's table population
(sequential-insert). Seed 002's wide row: eleven columns of numbers and customer-like text, a heap."""

from __future__ import annotations

from storlab.engines.base import Table

_SEED_ROW_POSTGRES = "c2 timestamp DEFAULT now(), c3 char(111) DEFAULT 'a', c4 int DEFAULT 1, c5 int DEFAULT 2, c6 bigint DEFAULT 42"
_SEED_ROW_MARIADB = ("c2 DATETIME DEFAULT CURRENT_TIMESTAMP, c3 CHAR(111) DEFAULT 'a', c4 INT DEFAULT 1, "
                     "c5 INT DEFAULT 2, c6 BIGINT DEFAULT 42")

RANDOM_KEY_POSTGRES = Table("lab_insert", "c1 uuid NOT NULL DEFAULT gen_random_uuid(), " + _SEED_ROW_POSTGRES, "c1", "uuid")
RANDOM_KEY_MARIADB = Table("lab_insert", "c1 UUID NOT NULL PRIMARY KEY, " + _SEED_ROW_MARIADB, "c1", "uuid")

SERIAL_KEY_POSTGRES = Table("lab_insert", "c1 bigint GENERATED ALWAYS AS IDENTITY, " + _SEED_ROW_POSTGRES, "c1", "serial")
SERIAL_KEY_MARIADB = Table("lab_insert", "c1 BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, " + _SEED_ROW_MARIADB, "c1",
                           "serial")

# Seed 002's BigData row (NOT NULL throughout, as its second version of the table).
_WIDE_POSTGRES = ("id bigint NOT NULL, col1 int NOT NULL, col2 bigint NOT NULL, col3 bigint NOT NULL, "
                  "col4 bigint NOT NULL, col5 bigint NOT NULL, col6 varchar(60) NOT NULL, col7 varchar(60) NOT NULL, "
                  "col8 varchar(50) NOT NULL, col9 varchar(50) NOT NULL, col10 varchar(50) NOT NULL, "
                  "col11 varchar(15) NOT NULL")
WIDE_POSTGRES = Table("lab_wide", _WIDE_POSTGRES, "id", "serial", index_key=False)
WIDE_MARIADB = Table("lab_wide", _WIDE_POSTGRES.replace("id bigint NOT NULL", "id BIGINT NOT NULL PRIMARY KEY"),
                     "id", "serial", index_key=False)
# Row i of the wide table, from a generated integer column `{g}`: numbers, and text of customer-like
# lengths (address lines of 20-30 characters, names, a 10-character alternate key).
WIDE_VALUES = ("{g}, {g} % 24, {g} + 1, {g} + 2, {g} + 3, {g} + 4, "
               "concat('Address line one ', {g}), concat('Address line two ', {g} % 7), "
               "concat('First', {g} % 1000), 'M', concat('Last', {g} % 5000), concat('AW', lpad(concat({g}), 8, '0'))")
