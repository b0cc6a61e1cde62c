%% framework-m's store exchange for RabbitMQ: small records with versions, written by
%% compare-and-set, forgotten after their ttl, kept in the broker for every connection.
%%
%% Exchange type `x-fm-store`. A message published to it is a request, never routed to
%% a queue: its body is one or more operations, carried out in order in one Mnesia
%% transaction (a later one sees the earlier ones), and answered on the queue named by
%% the request's reply_to, through the default exchange of the exchange's virtual
%% host, with the request's correlation_id. The answer's header `x-fm-store-result` is
%% `ok` with one answer per operation in the body, or `error` with the reason in
%% `x-fm-store-error` (nothing changed). A request without reply_to gets no answer.
%% The answer is sent after the transaction committed, so a request that starts after
%% an answer sees its changes or later ones, on any node.
%%
%% Operations (big-endian; Key is UTF-8, 1 to 2048 bytes; Value at most 131072 bytes;
%% TTL in ms, 1 to 604800000, 0 for none):
%%
%%   <<1, KL:16, Key>>                                   read
%%   <<2, KL:16, Key, Cond, Version:64, Delete, TTL:32, VL:32, Value>>
%%        write, when Cond holds: 0 always, 1 the key has no record, 2 its record has
%%        Version; Delete 1 removes the record (no TTL, no value)
%%   <<3, KL:16, Key, Places:16, TTL:32, VL:32, Value>>
%%        claim: the first of Places places (the keys Key#0, Key#1, ...) that holds the
%%        same value or, failing that, no record, is written with Value for TTL
%%
%% Answers, in the order of the operations:
%%
%%   read   <<1, Version:64, VL:32, Value>>, or <<0, 0:64, 0:32>> for no record
%%   write  <<Version:64>>: the new version (a delete's: the version removed), 0 when
%%          the condition did not hold and nothing changed
%%   claim  <<Place:16, Version:64>>, or <<65535:16, 0:64>> when every place is held
%%
%% Every version is greater than every version the exchange gave before: a counter
%% per exchange, started at the broker's clock in microseconds, so that a store
%% deleted and declared again does not give old versions back. An expired record
%% reads as none; each write drops a few expired records of its exchange, soonest
%% first, so records nobody touches again do not pile up. Expiry is measured by the
%% broker's clock.
%%
%% Exchange argument `x-store-persistence`: `disk` (the default) or `memory`. The
%% records are a Mnesia table with a copy on every node (on disk too, or in RAM only).
-module(rabbit_exchange_type_fm_store).

-include_lib("rabbit_common/include/rabbit.hrl").
-include_lib("rabbit_common/include/rabbit_framing.hrl").

-behaviour(rabbit_exchange_type).

-export([description/0, serialise_events/0, route/2, validate/1,
         validate_binding/2, create/2, delete/3, policy_changed/2,
         add_binding/3, remove_bindings/3, assert_args_equivalence/2,
         info/1, info/2]).
-export([setup_schema/0, register_type/0, disable_plugin/0]).

-define(TYPE, <<"x-fm-store">>).
-define(RESULT, <<"x-fm-store-result">>).
-define(ERROR, <<"x-fm-store-error">>).
-define(PERSISTENCE_ARG, <<"x-store-persistence">>).
-define(SWEEP, 16).  %% expired records a write removes at most
-define(MAX_KEY, 2048).  %% bytes of a key
-define(MAX_VALUE, 131072).  %% bytes of a value
-define(MAX_TTL, 604800000).  %% milliseconds: seven days
-define(MAX_OPS, 1000).  %% operations in one request
-define(MAX_PLACES, 1000).
-define(NO_PLACE, 16#FFFF).

%% key: {XName, Key}; expires_at: ms or infinity; slot: its key in the expiry index, or
%% undefined without a ttl.
-record(fm_record, {key, value, version, expires_at, slot}).
%% key: {XName, {ExpiresAt, Unique}}; record: the record's Key.
-record(fm_record_expiry, {key, record}).
%% key: XName; version: the last version given.
-record(fm_store_version, {key, version}).

-rabbit_boot_step({?MODULE,
                   [{description, "exchange type x-fm-store (framework-m)"},
                    {mfa, {rabbit_registry, register, [exchange, ?TYPE, ?MODULE]}},
                    {cleanup, {?MODULE, disable_plugin, []}},
                    {requires, rabbit_registry},
                    {enables, kernel_ready}]}).

-rabbit_boot_step({rabbit_exchange_type_fm_store_mnesia,
                   [{description, "x-fm-store (framework-m): mnesia"},
                    {mfa, {?MODULE, setup_schema, []}},
                    {requires, database},
                    {enables, external_infrastructure}]}).

description() ->
    [{description, <<"Keeps small versioned records, answering by reply_to">>}].

serialise_events() -> false.

route(#exchange{name = XName, arguments = Args},
      #delivery{message = #basic_message{content = Content}}) ->
    #content{properties = Props} = Decoded = rabbit_binary_parser:ensure_content_decoded(Content),
    #'P_basic'{reply_to = ReplyTo, correlation_id = Correlation} = Props,
    Answer = try
                 handle(XName, tables(Args), ops(body(Decoded), 0, []))
             catch
                 throw:{invalid, Why} -> {<<"error">>, Why, <<>>}
             end,
    answer(XName, ReplyTo, Correlation, Answer),
    [].

body(#content{payload_fragments_rev = Fragments}) ->
    iolist_to_binary(lists:reverse(Fragments)).

ops(<<>>, 0, _Acc) -> throw({invalid, <<"a request holds at least one operation">>});
ops(<<>>, _N, Acc) -> lists:reverse(Acc);
ops(_Body, ?MAX_OPS, _Acc) -> throw({invalid, <<"a request holds at most 1000 operations">>});
ops(<<1, KL:16, Key:KL/binary, Rest/binary>>, N, Acc) ->
    ops(Rest, N + 1, [{read, key(Key)} | Acc]);
ops(<<2, KL:16, Key:KL/binary, Cond, Version:64, Delete, TTL:32, VL:32, Value:VL/binary,
      Rest/binary>>, N, Acc) ->
    Condition = case {Cond, Version} of
                    {0, _} -> any;
                    {1, _} -> absent;
                    {2, V} when V > 0 -> {version, V};
                    _ -> throw({invalid, <<"a write's condition is 0 any, 1 absent or "
                                           "2 a version above 0">>})
                end,
    Write = case Delete of
                1 when TTL =:= 0, VL =:= 0 -> delete;
                0 -> {store, value(Value), ttl(TTL, true)};
                _ -> throw({invalid, <<"a delete takes no ttl and no value">>})
            end,
    ops(Rest, N + 1, [{write, key(Key), Condition, Write} | Acc]);
ops(<<3, KL:16, Key:KL/binary, Places:16, TTL:32, VL:32, Value:VL/binary, Rest/binary>>,
    N, Acc) ->
    (Places >= 1 andalso Places =< ?MAX_PLACES) orelse
        throw({invalid, <<"a claim takes 1 to 1000 places">>}),
    ops(Rest, N + 1, [{claim, key(Key), Places, value(Value), ttl(TTL, false)} | Acc]);
ops(_Body, _N, _Acc) -> throw({invalid, <<"a malformed operation">>}).

key(Key) when byte_size(Key) > 0, byte_size(Key) =< ?MAX_KEY -> Key;
key(_Key) -> throw({invalid, <<"a record key is 1 to 2048 bytes">>}).

value(Value) when byte_size(Value) =< ?MAX_VALUE -> Value;
value(_Value) -> throw({invalid, <<"a record value is at most 131072 bytes">>}).

ttl(0, true) -> infinity;
ttl(TTL, _) when TTL > 0, TTL =< ?MAX_TTL -> TTL;
ttl(_TTL, _) -> throw({invalid, <<"a record ttl is 1 to 604800000 (ms)">>}).

handle(XName, Tables, Ops) ->
    Writes = lists:any(fun({read, _}) -> false; (_) -> true end, Ops),
    Run = fun() ->
              Now = erlang:system_time(millisecond),
              Answers = [op(XName, Tables, Now, Op) || Op <- Ops],
              Writes andalso sweep(XName, Tables, Now, ?SWEEP),
              Answers
          end,
    case mnesia:transaction(Run) of
        {atomic, Answers} -> {<<"ok">>, undefined, iolist_to_binary(Answers)};
        {aborted, Reason} ->
            rabbit_log:warning("x-fm-store: a request failed: ~p", [Reason]),
            {<<"error">>, <<"the store's table refused the request">>, <<>>}
    end.

op(XName, Tables, Now, {read, Key}) ->
    case live(stored(XName, Tables, Key, read), Now) of
        #fm_record{value = Value, version = Version} ->
            <<1, Version:64, (byte_size(Value)):32, Value/binary>>;
        none -> <<0, 0:64, 0:32>>
    end;
op(XName, Tables, Now, {write, Key, Condition, Write}) ->
    Stored = stored(XName, Tables, Key, write),
    Live = live(Stored, Now),
    case {holds(Condition, Live), Write, Live} of
        {false, _, _} -> <<0:64>>;
        {true, delete, none} -> <<0:64>>;
        {true, delete, #fm_record{version = Version}} ->
            remove(Tables, Stored),
            <<Version:64>>;
        {true, {store, Value, TTL}, _} ->
            <<(put(XName, Tables, Now, Key, Value, TTL, Stored)):64>>
    end;
op(XName, Tables, Now, {claim, Key, Places, Value, TTL}) ->
    case choose(XName, Tables, Now, Key, Value, 0, Places, none) of
        none -> <<?NO_PLACE:16, 0:64>>;
        {Place, PlaceKey, Stored} ->
            <<Place:16, (put(XName, Tables, Now, PlaceKey, Value, TTL, Stored)):64>>
    end.

%% The place holding Value, else the first without a live record, else none.
choose(_XName, _Tables, _Now, _Key, _Value, Places, Places, Free) -> Free;
choose(XName, Tables, Now, Key, Value, N, Places, Free) ->
    PlaceKey = <<Key/binary, "#", (integer_to_binary(N))/binary>>,
    Stored = stored(XName, Tables, PlaceKey, write),
    case live(Stored, Now) of
        #fm_record{value = Value} -> {N, PlaceKey, Stored};
        none when Free =:= none ->
            choose(XName, Tables, Now, Key, Value, N + 1, Places, {N, PlaceKey, Stored});
        _ -> choose(XName, Tables, Now, Key, Value, N + 1, Places, Free)
    end.

holds(any, _) -> true;
holds(absent, none) -> true;
holds({version, V}, #fm_record{version = V}) -> true;
holds(_, _) -> false.

stored(XName, {Records, _, _}, Key, Lock) ->
    case mnesia:read(Records, {XName, Key}, Lock) of
        [Record] -> Record;
        [] -> none
    end.

live(#fm_record{expires_at = Expires}, Now) when Expires =/= infinity, Expires =< Now -> none;
live(Stored, _Now) -> Stored.

put(XName, {Records, Expiry, _} = Tables, Now, Key, Value, TTL, Stored) ->
    forget_slot(Expiry, Stored),
    Version = next_version(XName, Tables),
    {ExpiresAt, Slot} = case TTL of
                            infinity -> {infinity, undefined};
                            _ -> {Now + TTL,
                                  {XName, {Now + TTL, erlang:unique_integer([monotonic])}}}
                        end,
    mnesia:write(Records, #fm_record{key = {XName, Key}, value = Value, version = Version,
                                     expires_at = ExpiresAt, slot = Slot}, write),
    Slot =:= undefined orelse
        mnesia:write(Expiry, #fm_record_expiry{key = Slot, record = Key}, write),
    Version.

remove({Records, Expiry, _}, #fm_record{key = Key} = Stored) ->
    forget_slot(Expiry, Stored),
    mnesia:delete(Records, Key, write).

forget_slot(Expiry, #fm_record{slot = Slot}) when Slot =/= undefined ->
    mnesia:delete(Expiry, Slot, write);
forget_slot(_Expiry, _Stored) -> ok.

next_version(XName, {_, _, Versions}) ->
    Version = case mnesia:read(Versions, XName, write) of
                  [#fm_store_version{version = Last}] -> Last + 1;
                  [] -> erlang:system_time(microsecond)
              end,
    mnesia:write(Versions, #fm_store_version{key = XName, version = Version}, write),
    Version.

%% Drop up to Budget records of XName whose expiry has passed, soonest first. {XName, 0}
%% sorts before every {XName, {_, _}} key (a number before any tuple), so the key after
%% it is the exchange's record that expires first.
sweep(_XName, _Tables, _Now, 0) -> ok;
sweep(XName, {Records, Expiry, _} = Tables, Now, Budget) ->
    case mnesia:next(Expiry, {XName, 0}) of
        {XName, {ExpiresAt, _}} = Slot when ExpiresAt =< Now ->
            [#fm_record_expiry{record = Key}] = mnesia:read(Expiry, Slot, write),
            mnesia:delete(Expiry, Slot, write),
            case mnesia:read(Records, {XName, Key}, write) of
                [#fm_record{slot = Slot}] -> mnesia:delete(Records, {XName, Key}, write);
                _ -> ok  %% written again since: its new slot is elsewhere
            end,
            sweep(XName, Tables, Now, Budget - 1);
        _ -> ok
    end.

answer(_XName, undefined, _Correlation, _Answer) -> ok;
answer(#resource{virtual_host = VHost}, ReplyTo, Correlation, {Result, Why, Body}) ->
    Headers = [{?RESULT, longstr, Result}
               | [{?ERROR, longstr, Why} || Why =/= undefined]],
    Props = #'P_basic'{correlation_id = Correlation, headers = Headers, delivery_mode = 1},
    try
        rabbit_basic:publish(rabbit_misc:r(VHost, exchange, <<>>), ReplyTo, Props, Body)
    catch
        Class:Reason ->
            rabbit_log:warning("x-fm-store: cannot answer ~s: ~p:~p", [ReplyTo, Class, Reason])
    end,
    ok.

tables(Args) ->
    case rabbit_misc:table_lookup(Args, ?PERSISTENCE_ARG) of
        {_, <<"memory">>} -> {fm_store, fm_store_expiry, fm_store_versions};
        _ -> {fm_store_disk, fm_store_expiry_disk, fm_store_versions_disk}
    end.

validate(#exchange{arguments = Args}) ->
    case rabbit_misc:table_lookup(Args, ?PERSISTENCE_ARG) of
        undefined -> ok;
        {longstr, P} when P =:= <<"memory">>; P =:= <<"disk">> -> ok;
        _ -> rabbit_misc:protocol_error(precondition_failed,
                                        "x-store-persistence must be \"memory\" or \"disk\"", [])
    end.

validate_binding(_X, _B) -> ok.
create(_Tx, _X) -> ok.

delete(transaction, _X, _Bs) -> ok;
delete(none, #exchange{name = XName, arguments = Args}, _Bs) ->
    {Records, Expiry, Versions} = tables(Args),
    mnesia:transaction(
      fun() ->
          [mnesia:delete(Records, Key, write)
           || #fm_record{key = Key}
                  <- mnesia:match_object(Records, #fm_record{key = {XName, '_'}, _ = '_'},
                                         write)],
          [mnesia:delete(Expiry, Slot, write)
           || #fm_record_expiry{key = Slot}
                  <- mnesia:match_object(Expiry, #fm_record_expiry{key = {XName, '_'}, _ = '_'},
                                         write)],
          mnesia:delete(Versions, XName, write)
      end),
    ok;
delete(_Tx, _X, _Bs) -> ok.

policy_changed(_X1, _X2) -> ok.
add_binding(_Tx, _X, _B) -> ok.
remove_bindings(_Tx, _X, _Bs) -> ok.

assert_args_equivalence(#exchange{name = Name, arguments = Args}, NewArgs) ->
    rabbit_misc:assert_args_equivalence(Args, NewArgs, Name, [?PERSISTENCE_ARG]).

info(_X) -> [].
info(_X, _) -> [].

%% For a node that runs an older build of the plugin: the boot step's registration.
register_type() ->
    rabbit_registry:register(exchange, ?TYPE, ?MODULE).

%% Idempotent: build.sh also calls it after loading new code into a running node.
setup_schema() ->
    Record = record_info(fields, fm_record),
    Expiry = record_info(fields, fm_record_expiry),
    Version = record_info(fields, fm_store_version),
    rabbit_fm_tables:ensure(
      "x-fm-store",
      [{fm_store, fm_record, Record, set, ram_copies},
       {fm_store_expiry, fm_record_expiry, Expiry, ordered_set, ram_copies},
       {fm_store_versions, fm_store_version, Version, set, ram_copies},
       {fm_store_disk, fm_record, Record, set, disc_copies},
       {fm_store_expiry_disk, fm_record_expiry, Expiry, ordered_set, disc_copies},
       {fm_store_versions_disk, fm_store_version, Version, set, disc_copies}]).

disable_plugin() ->
    rabbit_registry:unregister(exchange, ?TYPE),
    ok.
