-- Docker only: the same role and database `eosflow stack up` provisions natively.
create role eosflow login nosuperuser password 'eosflow';
create database warehouse owner eosflow;
