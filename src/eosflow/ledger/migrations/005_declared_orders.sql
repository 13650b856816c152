-- Issue 14: the orders table is made from its declaration in pipelines.yml like any pipeline's.
-- The declaration's currency is text checked by a pattern (three upper-case letters), so the
-- column migration 002 made as char(3) becomes text; the values are unchanged.
alter table raw.orders alter column currency type text;
