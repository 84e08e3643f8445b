-- Revenue and sale lines by category as the refined zone was at ${as_of} (Iceberg time travel).
SELECT
    category,
    SUM(revenue) AS revenue,
    SUM(lines) AS sale_lines
FROM ${refined_db}.daily_revenue_by_category FOR ${as_of}
GROUP BY category
ORDER BY category NULLS LAST
