-- Returns and cancellations (sale lines deleted at the source) since an earlier point, by category:
-- lines present in sales_enriched as of ${as_of} that are gone now (Iceberg time travel).
SELECT
    earlier.category,
    COUNT(*) AS lines_removed,
    SUM(earlier.quantity) AS units_removed,
    SUM(earlier.revenue) AS revenue_removed,
    SUM(earlier.profit) AS profit_removed
FROM ${refined_db}.sales_enriched FOR ${as_of} earlier
LEFT JOIN ${refined_db}.sales_enriched current_sales
    ON current_sales.ws_item_sk = earlier.ws_item_sk
    AND current_sales.ws_order_number = earlier.ws_order_number
WHERE current_sales.ws_item_sk IS NULL
GROUP BY earlier.category
ORDER BY revenue_removed DESC, earlier.category NULLS LAST
