-- Revenue, profit and units by customer state and month (the customer's current address).
SELECT
    customer_state,
    year(sold_date) AS sold_year,
    month(sold_date) AS sold_month,
    SUM(revenue) AS revenue,
    SUM(profit) AS profit,
    SUM(quantity) AS units
FROM ${refined_db}.daily_revenue_by_state
WHERE sold_date IS NOT NULL
GROUP BY customer_state, year(sold_date), month(sold_date)
ORDER BY sold_year, sold_month, customer_state NULLS LAST
