{{ config(materialized='incremental', unique_key=['sold_date', 'category']) }}
-- Per day and category: revenue, profit, net paid, units, distinct orders and sale lines. A null category
-- groups the sales whose item was deleted.
SELECT
    sold_date,
    category,
    sum(revenue) AS revenue,
    sum(profit) AS profit,
    sum(net_paid) AS net_paid,
    CAST(sum(quantity) AS BIGINT) AS quantity,
    count(DISTINCT ws_order_number) AS orders,
    count(*) AS lines
FROM {{ ref('sales_enriched') }}
GROUP BY sold_date, category
