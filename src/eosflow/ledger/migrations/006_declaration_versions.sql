-- Issue 14: every row records the version of its pipeline's declaration it was checked against.
-- A version is a declaration as it was (format, key, columns, business key, transform); the same
-- declaration again is the same version. A plan records the version it was made under, so a retry
-- checks its records exactly as the first attempt did.
create table eosflow.declarations (
    pipeline     text not null,
    version      int not null,
    fingerprint  text not null,
    declaration  jsonb not null,
    created_at   timestamptz not null default now(),
    primary key (pipeline, version),
    unique (pipeline, fingerprint)
);

alter table eosflow.plans add column declaration_version int;
