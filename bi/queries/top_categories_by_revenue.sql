-- Top product categories by revenue, with profit, margin, units and orders (all days).
-- A null category holds the sales of items deleted from the catalogue.
SELECT
    category,
    SUM(revenue) AS revenue,
    SUM(profit) AS profit,
    ROUND(CAST(SUM(profit) AS DOUBLE) / CAST(SUM(revenue) AS DOUBLE), 4) AS margin,
    SUM(quantity) AS units,
    SUM(orders) AS orders
FROM ${refined_db}.daily_revenue_by_category
GROUP BY category
ORDER BY revenue DESC, category NULLS LAST
LIMIT 10
