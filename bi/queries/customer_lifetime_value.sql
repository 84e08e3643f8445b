-- The 20 customers with the highest lifetime value (net paid), with their orders and first/last order day.
SELECT
    customer_sk,
    customer_first_name,
    customer_last_name,
    customer_state,
    COUNT(DISTINCT ws_order_number) AS orders,
    SUM(net_paid) AS lifetime_value,
    SUM(profit) AS lifetime_profit,
    MIN(sold_date) AS first_order_date,
    MAX(sold_date) AS last_order_date
FROM ${refined_db}.sales_enriched
WHERE customer_sk IS NOT NULL
GROUP BY customer_sk, customer_first_name, customer_last_name, customer_state
ORDER BY lifetime_value DESC, customer_sk
LIMIT 20
