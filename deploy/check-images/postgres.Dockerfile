# What docker-compose.yml uses of the postgres image (POSTGRES_USER, POSTGRES_DB and POSTGRES_PASSWORD make the
# cluster on first start, data in /var/lib/postgresql/data, pg_isready), from Debian's PostgreSQL 15.
ARG DEBIAN_IMAGE=trainyard-check/debian:bookworm
FROM ${DEBIAN_IMAGE}

# The package would make a cluster of its own in the image; the entrypoint makes one in the volume.
RUN mkdir -p /etc/postgresql-common \
    && echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf \
    && apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data \
    && install -d -o postgres -g postgres /run/postgresql

ENV PATH=/usr/lib/postgresql/15/bin:$PATH \
    PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/
USER postgres
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
