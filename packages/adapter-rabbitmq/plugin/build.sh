#!/usr/bin/env bash
# framework-m's RabbitMQ plugin (exchange types x-message-deduplication and x-fm-store)
# as an .ez archive, built against the RabbitMQ on this machine, installed the way
# RabbitMQ installs any plugin: into the plugins directory the broker itself reports,
# then `rabbitmq-plugins enable`. Idempotent; a broker running an older build is moved
# to the new one.
#
#   build.sh            build, install and enable (erlc; write access to the plugins
#                       directory, usually root)
#   build.sh --ez DIR   only build DIR/framework_m_dedup_exchange-<version>.ez, for an
#                       image or a node without erlc (same RabbitMQ version)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
name=framework_m_dedup_exchange
version=0.1.0
out=""
if [ "${1:-}" = "--ez" ]; then
  out=${2:?usage: build.sh [--ez DIR]}
elif [ $# -gt 0 ]; then
  echo "usage: build.sh [--ez DIR]" >&2
  exit 2
fi

# "Plugin archives directory: a:b" from the running node, else from its environment.
listing=$(rabbitmq-plugins directories --online 2>/dev/null ||
          rabbitmq-plugins directories --offline 2>/dev/null || true)
archives=$(printf '%s\n' "$listing" | sed -n 's/^Plugin archives directory: //p')
if [ -z "$archives" ]; then
  echo "rabbitmq-plugins reports no plugins directory: is RabbitMQ installed here?" >&2
  exit 1
fi
IFS=: read -r -a dirs <<<"$archives"
common=""
for dir in "${dirs[@]}"; do
  found=$(ls -d "$dir"/rabbit_common-* 2>/dev/null | sort -V | tail -n 1 || true)
  [ -n "$found" ] && common=$found
done
if [ -z "$common" ]; then
  echo "no rabbit_common in $archives: cannot compile against this RabbitMQ" >&2
  exit 1
fi
rabbit_vsn=$(basename "$common" | sed 's/^rabbit_common-//; s/\.ez$//')

build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
app="$build/$name-$version"
mkdir -p "$app/ebin"
ERL_LIBS="$(dirname "$common")" erlc -o "$app/ebin" "$here"/src/*.erl
modules=$(cd "$app/ebin" && ls *.beam | sed 's/\.beam$//' | paste -sd, -)
cat > "$app/ebin/$name.app" <<APP
{application, '$name', [
  {description, "framework-m: x-message-deduplication and x-fm-store exchanges"},
  {vsn, "$version"},
  {modules, [$modules]},
  {registered, []},
  {applications, [kernel, stdlib, mnesia, rabbit_common, rabbit]},
  {env, []},
  {broker_version_requirements, ["$rabbit_vsn"]}
]}.
APP
ez="$name-$version.ez"
python3 -c 'import shutil, sys; shutil.make_archive(sys.argv[1], "zip", sys.argv[2], sys.argv[3])' \
  "$build/$name-$version" "$build" "$name-$version"
mv "$build/$name-$version.zip" "$build/$ez"
if [ -n "$out" ]; then
  mkdir -p "$out"
  cp "$build/$ez" "$out/"
  echo "built $out/$ez (RabbitMQ $rabbit_vsn)"
  exit 0
fi

# The first directory of the list that exists (RabbitMQ reads them all).
target=""
for dir in "${dirs[@]}"; do
  if [ -d "$dir" ]; then target=$dir; break; fi
done
target=${target:-${dirs[0]}}
mkdir -p "$target"
for dir in "${dirs[@]}"; do  # an earlier build, archived or expanded, anywhere in the list
  rm -rf "$dir/$name-$version" "$dir/$name-$version.ez"
done
cp "$build/$ez" "$target/"
echo "installed $target/$ez"
if rabbitmq-plugins is_enabled --quiet "$name" >/dev/null 2>&1 &&
   rabbitmqctl --quiet eval "lists:keymember($name, 1, application:which_applications())." \
     2>/dev/null | grep -q true; then
  # Running an older build: stop it so that the enable below loads the new one and
  # makes what it adds (its exchanges route nothing for that moment).
  rabbitmq-plugins disable --quiet "$name" >/dev/null
fi
rabbitmq-plugins enable --quiet "$name" >/dev/null
echo "enabled $name"
