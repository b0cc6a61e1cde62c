#!/usr/bin/env bash
# Build framework-m's x-message-deduplication exchange plugin against the installed
# RabbitMQ, install it into that RabbitMQ's plugins directory and enable it.
# Idempotent. Needs erlc and write access to the plugins directory (root).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
name=framework_m_dedup_exchange
version=0.1.0

plugins_dir=$(ls -d /usr/lib/rabbitmq/lib/rabbitmq_server-*/plugins 2>/dev/null | sort -V | tail -n 1)
if [ -z "$plugins_dir" ]; then
  echo "no RabbitMQ installation under /usr/lib/rabbitmq" >&2
  exit 1
fi
rabbit_vsn=$(basename "$(dirname "$plugins_dir")" | sed 's/rabbitmq_server-//')

target="$plugins_dir/$name-$version"
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
mkdir -p "$build/ebin"
ERL_LIBS="$plugins_dir" erlc -o "$build/ebin" "$here"/src/*.erl
modules=$(cd "$build/ebin" && ls *.beam | sed 's/\.beam$//' | paste -sd, -)
cat > "$build/ebin/$name.app" <<APP
{application, '$name', [
  {description, "framework-m: x-message-deduplication and x-fm-memos exchanges"},
  {vsn, "$version"},
  {modules, [$modules]},
  {registered, []},
  {applications, [kernel, stdlib, mnesia, rabbit_common, rabbit]},
  {env, []},
  {broker_version_requirements, ["$rabbit_vsn"]}
]}.
APP
rm -rf "$target"
mkdir -p "$target"
cp -r "$build/ebin" "$target/"
echo "installed $target"
rabbitmq-plugins enable --quiet "$name"
# When the plugin was enabled already, the node still runs the old code: load the new,
# register the exchange types a newer version added and create their tables.
rabbitmqctl --quiet eval '
  [{module, _} = c:l(M) || M <- [rabbit_fm_tables, rabbit_exchange_type_fm_dedup,
                                 rabbit_exchange_type_fm_memos]],
  ok = rabbit_exchange_type_fm_memos:register_type(),
  rabbit_exchange_type_fm_dedup:setup_schema(),
  rabbit_exchange_type_fm_memos:setup_schema().' >/dev/null
echo "enabled $name"
