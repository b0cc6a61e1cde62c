%% framework-m's message-deduplication exchange for RabbitMQ.
%%
%% Exchange type `x-message-deduplication`: a message whose
%% `x-deduplication-header` value was seen on this exchange within its TTL is
%% routed nowhere (a publisher using `mandatory` gets it back as basic.return);
%% any other message is routed to every binding, like a fanout exchange. A
%% message whose `x-fm-not-after` header (unix milliseconds) has passed when it
%% arrives is routed nowhere too, and not remembered: a tick held up by a paused
%% broker or a full socket buffer must not run after its grace.
%%
%% Exchange arguments: `x-cache-size` (entries kept, required, 1 to 10,000,000),
%% `x-cache-ttl` (milliseconds, optional) and `x-cache-persistence` (`memory`,
%% the default, or `disk`). A message header `x-cache-ttl` overrides the
%% exchange's TTL for that message. Without a TTL an entry lives until the size
%% bound evicts it. The cache is a Mnesia table with a copy on every node, so it
%% holds across a cluster: in RAM, or on disk too so that it survives a restart.
%% An entry holds an id of at most 64 bytes (a longer one is kept as its SHA-256),
%% so the cache's size in bytes is bounded by its entry count. Deleting an
%% exchange visits its own entries only (through the ordered index).
-module(rabbit_exchange_type_fm_dedup).

-include_lib("rabbit_common/include/rabbit.hrl").
-include_lib("rabbit_common/include/rabbit_framing.hrl").

-behaviour(rabbit_exchange_type).

-export([description/0, serialise_events/0, route/2, validate/1,
         validate_binding/2, create/2, delete/3, policy_changed/2,
         add_binding/3, remove_bindings/3, assert_args_equivalence/2,
         info/1, info/2]).
-export([setup_schema/0, disable_plugin/0]).

-define(TYPE, <<"x-message-deduplication">>).
-define(CACHE, fm_dedup_cache).
-define(COUNT, fm_dedup_count).
-define(HEADER, <<"x-deduplication-header">>).
-define(NOT_AFTER, <<"x-fm-not-after">>).
-define(SIZE_ARG, <<"x-cache-size">>).
-define(TTL_ARG, <<"x-cache-ttl">>).
-define(PERSISTENCE_ARG, <<"x-cache-persistence">>).
-define(DISK_CACHE, fm_dedup_cache_disk).
-define(DISK_COUNT, fm_dedup_count_disk).
-define(ORDER, fm_dedup_order).
-define(DISK_ORDER, fm_dedup_order_disk).
-define(SWEEP, 16).  %% expired entries an insert removes at most
-define(MAX_SIZE, 10000000).  %% x-cache-size above this is refused
-define(MAX_KEY, 64).  %% ids longer than this (bytes) are kept as their SHA-256

-record(fm_dedup_entry, {key, expires_at, inserted_at}).
-record(fm_dedup_size, {exchange, count}).
-record(fm_dedup_order, {key, value}).

-rabbit_boot_step({?MODULE,
                   [{description, "exchange type x-message-deduplication (framework-m)"},
                    {mfa, {rabbit_registry, register, [exchange, ?TYPE, ?MODULE]}},
                    {cleanup, {?MODULE, disable_plugin, []}},
                    {requires, rabbit_registry},
                    {enables, kernel_ready}]}).

-rabbit_boot_step({rabbit_exchange_type_fm_dedup_mnesia,
                   [{description, "x-message-deduplication (framework-m): mnesia"},
                    {mfa, {?MODULE, setup_schema, []}},
                    {requires, database},
                    {enables, external_infrastructure}]}).

description() ->
    [{description, <<"Drops messages whose x-deduplication-header was seen within a TTL">>}].

serialise_events() -> false.

route(#exchange{name = XName, arguments = Args},
      #delivery{message = #basic_message{content = Content}}) ->
    Headers = headers(Content),
    case {too_late(Headers), rabbit_misc:table_lookup(Headers, ?HEADER)} of
        {true, _} -> [];
        {false, undefined} -> fanout(XName);
        {false, {_Type, Value}} ->
            case remember(XName, key(Value), ttl(Headers, Args), cache_size(Args),
                          tables(Args)) of
                duplicate -> [];
                new -> fanout(XName)
            end
    end.

too_late(Headers) ->
    case rabbit_misc:table_lookup(Headers, ?NOT_AFTER) of
        {_Type, NotAfter} when is_integer(NotAfter) ->
            erlang:system_time(millisecond) > NotAfter;
        _ -> false
    end.

fanout(XName) -> rabbit_router:match_routing_key(XName, ['_']).

%% What the cache keeps of a header value: itself when short, else its digest.
key(Value) when is_binary(Value), byte_size(Value) =< ?MAX_KEY -> Value;
key(Value) when is_binary(Value) -> {sha256, crypto:hash(sha256, Value)};
key(Value) -> key(term_to_binary(Value)).

headers(Content) ->
    #content{properties = #'P_basic'{headers = Headers}} =
        rabbit_binary_parser:ensure_content_decoded(Content),
    case Headers of
        undefined -> [];
        _ -> Headers
    end.

%% The tables of an exchange, by its x-cache-persistence: the cache ({XName, Value}
%% -> expiry), its insertion-order index ({XName, Inserted} -> Value, ordered) and the
%% entry count per exchange.
tables(Args) ->
    case rabbit_misc:table_lookup(Args, ?PERSISTENCE_ARG) of
        {_, <<"disk">>} -> {?DISK_CACHE, ?DISK_ORDER, ?DISK_COUNT};
        _ -> {?CACHE, ?ORDER, ?COUNT}
    end.

remember(XName, Value, TTL, Size, {Cache, Order, Counter} = Tables) ->
    Now = erlang:system_time(millisecond),
    Key = {XName, Value},
    Tx = fun() ->
             case mnesia:read(Cache, Key, write) of
                 [#fm_dedup_entry{expires_at = Expires}] when Expires > Now -> duplicate;
                 Existing ->
                     %% Order of insertion: time, then a node-unique tiebreak.
                     Inserted = {Now, erlang:unique_integer([monotonic])},
                     Count0 = count(Counter, XName),
                     Count1 = case Existing of
                                  [#fm_dedup_entry{inserted_at = Old}] ->
                                      mnesia:delete(Order, {XName, Old}, write),
                                      Count0;
                                  [] -> Count0 + 1
                              end,
                     mnesia:write(Cache, #fm_dedup_entry{key = Key, expires_at = expiry(Now, TTL),
                                                         inserted_at = Inserted}, write),
                     mnesia:write(Order, #fm_dedup_order{key = {XName, Inserted}, value = Value},
                                  write),
                     Count = trim(XName, Count1, Size, Now, ?SWEEP, Tables),
                     mnesia:write(Counter, #fm_dedup_size{exchange = XName, count = Count}, write),
                     new
             end
         end,
    case mnesia:transaction(Tx) of
        {atomic, Result} -> Result;
        {aborted, Reason} ->
            %% Never lose a message because the cache failed: route it.
            rabbit_log:warning("x-message-deduplication cache failed: ~p", [Reason]),
            new
    end.

expiry(_Now, undefined) -> infinity;
expiry(Now, TTL) -> Now + TTL.

count(Counter, XName) ->
    case mnesia:read(Counter, XName, write) of
        [#fm_dedup_size{count = C}] -> C;
        [] -> 0
    end.

%% Drop the oldest entries while there are more than Size, and up to Budget more
%% while the oldest has expired. Each step reads one key of the ordered index, so
%% an insert into a full cache costs O(log n), not a scan.
trim(XName, Count, Size, Now, Budget, {Cache, Order, _} = Tables) ->
    case oldest(Order, XName) of
        none -> Count;
        {OrderKey, Value} ->
            Key = {XName, Value},
            Expired = Budget > 0 andalso expired(Cache, Key, Now),
            case Count > Size orelse Expired of
                false -> Count;
                true ->
                    mnesia:delete(Order, OrderKey, write),
                    mnesia:delete(Cache, Key, write),
                    trim(XName, Count - 1, Size, Now, Budget - 1, Tables)
            end
    end.

%% {XName, _} keys sort together; {XName, 0} sorts before all of them (a number
%% before any tuple), so the next key after it is this exchange's oldest entry.
oldest(Order, XName) ->
    case mnesia:next(Order, {XName, 0}) of
        {XName, _} = OrderKey ->
            [#fm_dedup_order{value = Value}] = mnesia:read(Order, OrderKey, write),
            {OrderKey, Value};
        _ -> none
    end.

expired(Cache, Key, Now) ->
    case mnesia:read(Cache, Key, write) of
        [#fm_dedup_entry{expires_at = Expires}] -> Expires =< Now;
        [] -> true
    end.

ttl(Headers, Args) ->
    case rabbit_misc:table_lookup(Headers, ?TTL_ARG) of
        {_, T} when is_integer(T), T >= 0 -> T;
        _ -> case rabbit_misc:table_lookup(Args, ?TTL_ARG) of
                 {_, T} when is_integer(T), T >= 0 -> T;
                 _ -> undefined
             end
    end.

cache_size(Args) ->
    {_, Size} = rabbit_misc:table_lookup(Args, ?SIZE_ARG),
    Size.

validate(#exchange{arguments = Args}) ->
    case rabbit_misc:table_lookup(Args, ?SIZE_ARG) of
        {_, Size} when is_integer(Size), Size > 0, Size =< ?MAX_SIZE -> ok;
        _ -> rabbit_misc:protocol_error(precondition_failed,
                                        "x-message-deduplication needs x-cache-size, "
                                        "an integer from 1 to ~b", [?MAX_SIZE])
    end,
    case rabbit_misc:table_lookup(Args, ?TTL_ARG) of
        undefined -> ok;
        {_, TTL} when is_integer(TTL), TTL >= 0 -> ok;
        _ -> rabbit_misc:protocol_error(precondition_failed,
                                        "x-cache-ttl must be a non-negative integer "
                                        "(milliseconds)", [])
    end,
    case rabbit_misc:table_lookup(Args, ?PERSISTENCE_ARG) of
        undefined -> ok;
        {longstr, P} when P =:= <<"memory">>; P =:= <<"disk">> -> ok;
        _ -> rabbit_misc:protocol_error(precondition_failed,
                                        "x-cache-persistence must be \"memory\" or \"disk\"", [])
    end.

validate_binding(_X, _B) -> ok.
create(_Tx, _X) -> ok.

delete(transaction, _X, _Bs) -> ok;
delete(none, #exchange{name = XName, arguments = Args}, _Bs) ->
    {Cache, Order, Counter} = tables(Args),
    mnesia:transaction(
      fun() ->
          %% The ordered index holds one row per cached id, keyed {XName, Inserted}: a
          %% match on that key prefix visits this exchange's rows only.
          [begin
               mnesia:delete(Cache, {XName, Value}, write),
               mnesia:delete(Order, K, write)
           end
           || #fm_dedup_order{key = K, value = Value}
                  <- mnesia:match_object(Order, #fm_dedup_order{key = {XName, '_'}, _ = '_'},
                                         write)],
          mnesia:delete(Counter, XName, write)
      end),
    ok;
delete(_Tx, _X, _Bs) -> ok.

policy_changed(_X1, _X2) -> ok.
add_binding(_Tx, _X, _B) -> ok.
remove_bindings(_Tx, _X, _Bs) -> ok.

%% A re-declaration with another size, TTL or persistence is refused (406), like one
%% with another alternate exchange, instead of keeping the old values silently.
assert_args_equivalence(#exchange{name = Name, arguments = Args}, NewArgs) ->
    rabbit_misc:assert_args_equivalence(
      Args, NewArgs, Name, [<<"alternate-exchange">>, ?SIZE_ARG, ?TTL_ARG, ?PERSISTENCE_ARG]).

info(_X) -> [].
info(_X, _) -> [].

%% Idempotent: build.sh also calls it after loading new code into a running node.
setup_schema() ->
    rabbit_fm_tables:ensure(
      "x-message-deduplication",
      [{Name, Record, fields(Record), Type, Copies}
       || {Copies, Names} <- [{ram_copies, [?CACHE, ?ORDER, ?COUNT]},
                              {disc_copies, [?DISK_CACHE, ?DISK_ORDER, ?DISK_COUNT]}],
          {Name, {Record, Type}} <- lists:zip(Names, [{fm_dedup_entry, set},
                                                      {fm_dedup_order, ordered_set},
                                                      {fm_dedup_size, set}])]).

fields(fm_dedup_entry) -> record_info(fields, fm_dedup_entry);
fields(fm_dedup_order) -> record_info(fields, fm_dedup_order);
fields(fm_dedup_size) -> record_info(fields, fm_dedup_size).

disable_plugin() ->
    rabbit_registry:unregister(exchange, ?TYPE),
    ok.
