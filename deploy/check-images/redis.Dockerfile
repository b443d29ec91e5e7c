# What docker-compose.yml uses of the redis image (redis-server with its arguments, redis-cli for the
# healthcheck), from Debian's Redis 7.0.
ARG DEBIAN_IMAGE=trainyard-check/debian:bookworm
FROM ${DEBIAN_IMAGE}

RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/*
USER redis
WORKDIR /var/lib/redis
EXPOSE 6379
CMD ["redis-server"]
