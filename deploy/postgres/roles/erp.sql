-- Run in the ERP database (psql -d erp -f erp.sql) as the owner of its tables, after they
-- exist (cairn init --tables, or cairn gen) and after roles.sql. match reads the purchase
-- orders; compare the receipts and the stock levels (a shadow run copies the levels into
-- its own table); update-stock and the compensator insert stock adjustments, change the
-- levels they adjust and hold the fences; reader reads. Nobody but the owner changes the
-- purchase orders or the receipts.
DO $$
BEGIN
  EXECUTE format('REVOKE ALL ON DATABASE %I FROM PUBLIC', current_database());
  EXECUTE format('GRANT CONNECT ON DATABASE %I TO match, compare, update_stock, compensator, reader', current_database());
END
$$;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO match, compare, update_stock, compensator, reader;
GRANT SELECT ON purchase_orders TO match;
GRANT SELECT ON stock_received, stock_levels TO compare;
GRANT SELECT, INSERT ON shadow_stock_levels TO compare;
GRANT SELECT, INSERT ON stock_adjustments, shadow_stock_adjustments TO update_stock, compensator;
GRANT SELECT, UPDATE ON stock_levels, shadow_stock_levels TO update_stock, compensator;
GRANT SELECT, INSERT, UPDATE ON fences, shadow_fences TO update_stock, compensator;
GRANT SELECT ON stock_adjustments, shadow_stock_adjustments, stock_levels, shadow_stock_levels, fences, shadow_fences TO reader;
