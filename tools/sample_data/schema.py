"""The demo source's schema: its tables, their columns as a source catalog declares them, and their
primary keys; and how a caller names the source database."""

from __future__ import annotations

from pathlib import Path

from tools.source_db import SourceDatabase

Source = SourceDatabase | str | Path  # a SourceDatabase, or the path of an SQLite file

SOURCE_SCHEMA = "main"

# Declared like a source catalog does; reflection maps them (decimal(7,2) → decimal(7,2), …).
DDL: dict[str, str] = {
    "date_dim": """CREATE TABLE date_dim (
        d_date_sk INTEGER NOT NULL PRIMARY KEY,
        d_date_id CHAR(16) NOT NULL,
        d_date DATE NOT NULL,
        d_year INTEGER NOT NULL,
        d_moy INTEGER NOT NULL,
        d_dom INTEGER NOT NULL,
        d_qoy INTEGER NOT NULL,
        d_day_name VARCHAR(9) NOT NULL,
        d_weekend CHAR(1) NOT NULL,
        d_holiday CHAR(1) NOT NULL)""",
    "time_dim": """CREATE TABLE time_dim (
        t_time_sk INTEGER NOT NULL PRIMARY KEY,
        t_time_id CHAR(16) NOT NULL,
        t_time INTEGER NOT NULL,
        t_hour INTEGER NOT NULL,
        t_minute INTEGER NOT NULL,
        t_am_pm CHAR(2) NOT NULL,
        t_shift VARCHAR(20) NOT NULL,
        t_meal_time VARCHAR(20))""",
    "customer_address": """CREATE TABLE customer_address (
        ca_address_sk INTEGER NOT NULL PRIMARY KEY,
        ca_address_id CHAR(16) NOT NULL,
        ca_street_number VARCHAR(10),
        ca_street_name VARCHAR(60),
        ca_suite_number VARCHAR(10),
        ca_city VARCHAR(60),
        ca_county VARCHAR(30),
        ca_state CHAR(2),
        ca_zip CHAR(10),
        ca_country VARCHAR(20),
        ca_gmt_offset DECIMAL(5,2))""",
    "customer": """CREATE TABLE customer (
        c_customer_sk INTEGER NOT NULL PRIMARY KEY,
        c_customer_id CHAR(16) NOT NULL,
        c_current_addr_sk INTEGER,
        c_first_name VARCHAR(40),
        c_last_name VARCHAR(60),
        c_preferred_cust_flag CHAR(1),
        c_birth_date DATE,
        c_email_address VARCHAR(80),
        c_last_update TIMESTAMP NOT NULL)""",
    "item": """CREATE TABLE item (
        i_item_sk INTEGER NOT NULL PRIMARY KEY,
        i_item_id CHAR(16) NOT NULL,
        i_rec_start_date DATE,
        i_item_desc VARCHAR(200),
        i_current_price DECIMAL(7,2),
        i_wholesale_cost DECIMAL(7,2),
        i_brand VARCHAR(50),
        i_class VARCHAR(50),
        i_category VARCHAR(50),
        i_color VARCHAR(20),
        i_product_name VARCHAR(50))""",
    "web_sales": """CREATE TABLE web_sales (
        ws_item_sk INTEGER NOT NULL,
        ws_order_number INTEGER NOT NULL,
        ws_sold_date_sk INTEGER,
        ws_sold_time_sk INTEGER,
        ws_ship_date_sk INTEGER,
        ws_bill_customer_sk INTEGER,
        ws_ship_addr_sk INTEGER,
        ws_quantity INTEGER,
        ws_wholesale_cost DECIMAL(7,2),
        ws_list_price DECIMAL(7,2),
        ws_sales_price DECIMAL(7,2),
        ws_ext_discount_amt DECIMAL(7,2),
        ws_ext_sales_price DECIMAL(7,2),
        ws_ext_wholesale_cost DECIMAL(7,2),
        ws_ext_list_price DECIMAL(7,2),
        ws_ext_tax DECIMAL(7,2),
        ws_coupon_amt DECIMAL(7,2),
        ws_net_paid DECIMAL(7,2),
        ws_net_paid_inc_tax DECIMAL(7,2),
        ws_net_profit DECIMAL(7,2),
        PRIMARY KEY (ws_item_sk, ws_order_number))""",
}
TABLES = tuple(DDL)
PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "date_dim": ("d_date_sk",),
    "time_dim": ("t_time_sk",),
    "customer_address": ("ca_address_sk",),
    "customer": ("c_customer_sk",),
    "item": ("i_item_sk",),
    "web_sales": ("ws_item_sk", "ws_order_number"),
}
