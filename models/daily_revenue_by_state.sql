{{ config(materialized='incremental', unique_key=['sold_date', 'customer_state']) }}
-- Per day and customer_state: revenue, profit, net paid, units, distinct orders and sale lines. A null customer_state
-- groups the sales whose customer or address was deleted.
SELECT
    sold_date,
    customer_state,
    sum(revenue) AS revenue,
    sum(profit) AS profit,
    sum(net_paid) AS net_paid,
    CAST(sum(quantity) AS BIGINT) AS quantity,
    count(DISTINCT ws_order_number) AS orders,
    count(*) AS lines
FROM {{ ref('sales_enriched') }}
GROUP BY sold_date, customer_state
