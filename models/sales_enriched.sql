{{ config(materialized='incremental', unique_key=['ws_item_sk', 'ws_order_number']) }}
-- One row per web sale line with its day, hour, item, customer and the customer's current address. Dimensions
-- are left-joined: a sale whose item or customer was deleted stays, with null attributes.
SELECT
    ws.ws_item_sk,
    ws.ws_order_number,
    d.d_date AS sold_date,
    d.d_year AS sold_year,
    d.d_moy AS sold_month,
    t.t_hour AS sold_hour,
    d.d_holiday AS sold_on_holiday,
    ws.ws_bill_customer_sk AS customer_sk,
    c.c_first_name AS customer_first_name,
    c.c_last_name AS customer_last_name,
    a.ca_state AS customer_state,
    a.ca_city AS customer_city,
    i.i_item_id AS item_id,
    i.i_product_name AS product_name,
    i.i_category AS category,
    i.i_class AS item_class,
    i.i_brand AS brand,
    ws.ws_quantity AS quantity,
    ws.ws_list_price AS list_price,
    ws.ws_sales_price AS sales_price,
    ws.ws_ext_sales_price AS revenue,
    ws.ws_ext_discount_amt AS discount,
    ws.ws_coupon_amt AS coupon,
    ws.ws_net_paid AS net_paid,
    ws.ws_ext_wholesale_cost AS wholesale_cost,
    ws.ws_net_profit AS profit
FROM {{ source('web_sales') }} ws
LEFT JOIN {{ source('date_dim') }} d ON ws.ws_sold_date_sk = d.d_date_sk
LEFT JOIN {{ source('time_dim') }} t ON ws.ws_sold_time_sk = t.t_time_sk
LEFT JOIN {{ source('item') }} i ON ws.ws_item_sk = i.i_item_sk
LEFT JOIN {{ source('customer') }} c ON ws.ws_bill_customer_sk = c.c_customer_sk
LEFT JOIN {{ source('customer_address') }} a ON c.c_current_addr_sk = a.ca_address_sk
