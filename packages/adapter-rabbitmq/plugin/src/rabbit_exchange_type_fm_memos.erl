%% framework-m's memo exchange for RabbitMQ: small values under keys, forgotten after
%% their ttl, kept in the broker for every connection to read.
%%
%% Exchange type `x-fm-memos`. A message published to it is a request, never routed
%% to a queue: its header `x-fm-memo-op` says what to do with the memo named by
%% `x-fm-memo-key` (a UTF-8 key of at most 1,024 bytes):
%%
%%   put     keep the body under the key for `x-fm-memo-ttl` milliseconds, replacing
%%           what was there; answers `stored`
%%   create  the same where the key holds no unexpired memo (answers `stored`), else
%%           changes nothing (answers `refused`); of creates at once exactly one stores
%%   get     answers `found` with the memo as the body, or `none`
%%   batch   many of the above in one request (at most 1,000), the writes in one
%%           transaction; answers `batch` with one answer each, in request order
%%
%% A batch's body is its requests one after the other, each
%% <<Op:8, KeyLength:16, Key, TTL:32, ValueLength:32, Value>> with Op 1 put, 2 create
%% and 3 get (TTL 0 and no value for a get), and its answer's body one answer each,
%% <<Code:8, ValueLength:32, Value>> with Code 1 stored, 2 refused, 3 found, 4 none.
%%
%% The answer goes to the queue named by the request's reply_to, through the default
%% exchange of the exchange's virtual host, with the request's correlation_id and the
%% answer in the header `x-fm-memo-result` (`error`, with `x-fm-memo-error`, for a
%% request this exchange cannot carry out). A request without reply_to gets no answer.
%% The answer is sent after the memo table changed, so a reader that starts after an
%% answer sees that change or a later one. Expiry is measured by the broker's clock.
%%
%% Exchange argument `x-memo-persistence`: `memory` (the default) or `disk`. The memos
%% are a Mnesia table with a copy on every node (in RAM, or on disk too so that they
%% survive a restart); an index ordered by expiry lets each write drop a few expired
%% memos of its exchange, so memos nobody reads again do not pile up.
-module(rabbit_exchange_type_fm_memos).

-include_lib("rabbit_common/include/rabbit.hrl").
-include_lib("rabbit_common/include/rabbit_framing.hrl").

-behaviour(rabbit_exchange_type).

-export([description/0, serialise_events/0, route/2, validate/1,
         validate_binding/2, create/2, delete/3, policy_changed/2,
         add_binding/3, remove_bindings/3, assert_args_equivalence/2,
         info/1, info/2]).
-export([setup_schema/0, register_type/0, disable_plugin/0]).

-define(TYPE, <<"x-fm-memos">>).
-define(OP, <<"x-fm-memo-op">>).
-define(KEY, <<"x-fm-memo-key">>).
-define(TTL, <<"x-fm-memo-ttl">>).
-define(RESULT, <<"x-fm-memo-result">>).
-define(ERROR, <<"x-fm-memo-error">>).
-define(PERSISTENCE_ARG, <<"x-memo-persistence">>).
-define(MEMOS, fm_memos).
-define(EXPIRY, fm_memos_expiry).
-define(DISK_MEMOS, fm_memos_disk).
-define(DISK_EXPIRY, fm_memos_expiry_disk).
-define(SWEEP, 16).  %% expired memos a write removes at most
-define(MAX_KEY, 1024).  %% bytes of a key
-define(MAX_VALUE, 131072).  %% bytes of a value
-define(MAX_TTL, 604800000).  %% milliseconds: seven days
-define(MAX_BATCH, 1000).  %% requests in one batch

%% key: {XName, Key}; slot: the memo's key in the expiry index.
-record(fm_memo, {key, value, expires_at, slot}).
%% key: {XName, {ExpiresAt, Unique}}; memo: the memo's Key.
-record(fm_memo_expiry, {key, memo}).

-rabbit_boot_step({?MODULE,
                   [{description, "exchange type x-fm-memos (framework-m)"},
                    {mfa, {rabbit_registry, register, [exchange, ?TYPE, ?MODULE]}},
                    {cleanup, {?MODULE, disable_plugin, []}},
                    {requires, rabbit_registry},
                    {enables, kernel_ready}]}).

-rabbit_boot_step({rabbit_exchange_type_fm_memos_mnesia,
                   [{description, "x-fm-memos (framework-m): mnesia"},
                    {mfa, {?MODULE, setup_schema, []}},
                    {requires, database},
                    {enables, external_infrastructure}]}).

description() ->
    [{description, <<"Keeps small values under keys until their ttl, answering by reply_to">>}].

serialise_events() -> false.

route(#exchange{name = XName, arguments = Args},
      #delivery{message = #basic_message{content = Content}}) ->
    #content{properties = Props} = Decoded = rabbit_binary_parser:ensure_content_decoded(Content),
    #'P_basic'{headers = Headers0, reply_to = ReplyTo, correlation_id = Correlation} = Props,
    Headers = case Headers0 of undefined -> []; _ -> Headers0 end,
    Answer = try
                 handle(XName, tables(Args), request(Headers, body(Decoded)))
             catch
                 throw:{invalid, Why} -> {<<"error">>, Why, <<>>}
             end,
    answer(XName, ReplyTo, Correlation, Answer),
    [].

body(#content{payload_fragments_rev = Fragments}) ->
    iolist_to_binary(lists:reverse(Fragments)).

request(Headers, Body) ->
    case rabbit_misc:table_lookup(Headers, ?OP) of
        {longstr, <<"batch">>} -> {batch, batch(Body, 0, [])};
        _ -> single(Headers, Body)
    end.

batch(<<>>, _N, Acc) -> lists:reverse(Acc);
batch(_Body, ?MAX_BATCH, _Acc) -> throw({invalid, <<"a batch holds at most 1000 requests">>});
batch(<<Op:8, KL:16, Key:KL/binary, TTL:32, VL:32, Value:VL/binary, Rest/binary>>, N, Acc) ->
    (KL > 0 andalso KL =< ?MAX_KEY) orelse
        throw({invalid, <<"a memo key is a string of 1 to 1024 bytes">>}),
    Request = case Op of
                  3 -> {get, Key};
                  _ when Op =:= 1; Op =:= 2 ->
                      VL =< ?MAX_VALUE orelse
                          throw({invalid, <<"a memo value is at most 131072 bytes">>}),
                      (TTL > 0 andalso TTL =< ?MAX_TTL) orelse
                          throw({invalid, <<"a memo ttl is 1 to 604800000 (ms)">>}),
                      {case Op of 1 -> put; 2 -> create end, Key, Value, TTL};
                  _ -> throw({invalid, <<"a batch request's op is 1 put, 2 create or 3 get">>})
              end,
    batch(Rest, N + 1, [Request | Acc]);
batch(_Body, _N, _Acc) -> throw({invalid, <<"a malformed batch">>}).

single(Headers, Body) ->
    Key = case rabbit_misc:table_lookup(Headers, ?KEY) of
              {longstr, K} when byte_size(K) > 0, byte_size(K) =< ?MAX_KEY -> K;
              _ -> throw({invalid, <<"x-fm-memo-key must be a string of 1 to 1024 bytes">>})
          end,
    case rabbit_misc:table_lookup(Headers, ?OP) of
        {longstr, <<"get">>} -> {get, Key};
        {longstr, Op} when Op =:= <<"put">>; Op =:= <<"create">> ->
            byte_size(Body) =< ?MAX_VALUE orelse
                throw({invalid, <<"a memo value is at most 131072 bytes">>}),
            TTL = case rabbit_misc:table_lookup(Headers, ?TTL) of
                      {_, T} when is_integer(T), T > 0, T =< ?MAX_TTL -> T;
                      _ -> throw({invalid, <<"x-fm-memo-ttl must be 1 to 604800000 (ms)">>})
                  end,
            {binary_to_atom(Op), Key, Body, TTL};
        _ -> throw({invalid, <<"x-fm-memo-op must be put, create or get">>})
    end.

handle(XName, Tables, {get, Key}) ->
    case read(XName, Tables, Key) of
        {found, Value} -> {<<"found">>, undefined, Value};
        none -> {<<"none">>, undefined, <<>>}
    end;
handle(XName, Tables, {batch, Requests}) ->
    Writes = [W || W = {_, _, _, _} <- Requests],
    Write = fun() -> [write(XName, Tables, Op, K, V, T) || {Op, K, V, T} <- Writes] end,
    case mnesia:transaction(Write) of
        {atomic, Written} ->
            Answers = answers(XName, Tables, Requests, Written),
            {<<"batch">>, undefined, << <<Code:8, (byte_size(V)):32, V/binary>>
                                        || {Code, V} <- Answers >>};
        {aborted, Reason} ->
            rabbit_log:warning("x-fm-memos: a batch's writes failed: ~p", [Reason]),
            {<<"error">>, <<"the memo table refused the writes">>, <<>>}
    end;
handle(XName, Tables, {Op, Key, Value, TTL}) ->
    case mnesia:transaction(fun() -> write(XName, Tables, Op, Key, Value, TTL) end) of
        {atomic, stored} -> {<<"stored">>, undefined, <<>>};
        {atomic, refused} -> {<<"refused">>, undefined, <<>>};
        {aborted, Reason} ->
            rabbit_log:warning("x-fm-memos: a write failed: ~p", [Reason]),
            {<<"error">>, <<"the memo table refused the write">>, <<>>}
    end.

read(XName, {Memos, _}, Key) ->
    Now = erlang:system_time(millisecond),
    case mnesia:dirty_read(Memos, {XName, Key}) of
        [#fm_memo{value = Value, expires_at = Expires}] when Expires > Now -> {found, Value};
        _ -> none
    end.

%% The answers of a batch in request order: its writes' from Written, its gets read now
%% (after the writes, so a get sees a write before it in the batch).
answers(_XName, _Tables, [], []) -> [];
answers(XName, Tables, [{get, Key} | Rest], Written) ->
    Answer = case read(XName, Tables, Key) of
                 {found, Value} -> {3, Value};
                 none -> {4, <<>>}
             end,
    [Answer | answers(XName, Tables, Rest, Written)];
answers(XName, Tables, [_ | Rest], [Result | Written]) ->
    Code = case Result of stored -> 1; refused -> 2 end,
    [{Code, <<>>} | answers(XName, Tables, Rest, Written)].

write(XName, {Memos, Expiry} = Tables, Op, Key, Value, TTL) ->
    Now = erlang:system_time(millisecond),
    Existing = mnesia:read(Memos, {XName, Key}, write),
    case {Op, Existing} of
        {create, [#fm_memo{expires_at = Expires}]} when Expires > Now -> refused;
        _ ->
            case Existing of
                [#fm_memo{slot = Old}] -> mnesia:delete(Expiry, Old, write);
                [] -> ok
            end,
            ExpiresAt = Now + TTL,
            Slot = {XName, {ExpiresAt, erlang:unique_integer([monotonic])}},
            mnesia:write(Memos, #fm_memo{key = {XName, Key}, value = Value,
                                         expires_at = ExpiresAt, slot = Slot}, write),
            mnesia:write(Expiry, #fm_memo_expiry{key = Slot, memo = Key}, write),
            sweep(XName, Tables, Now, ?SWEEP),
            stored
    end.

%% Drop up to Budget memos of XName whose expiry has passed, soonest first. {XName, 0}
%% sorts before every {XName, {_, _}} key (a number before any tuple), so the key after
%% it is the exchange's memo that expires first.
sweep(_XName, _Tables, _Now, 0) -> ok;
sweep(XName, {Memos, Expiry} = Tables, Now, Budget) ->
    case mnesia:next(Expiry, {XName, 0}) of
        {XName, {ExpiresAt, _}} = Slot when ExpiresAt =< Now ->
            [#fm_memo_expiry{memo = Key}] = mnesia:read(Expiry, Slot, write),
            mnesia:delete(Expiry, Slot, write),
            case mnesia:read(Memos, {XName, Key}, write) of
                [#fm_memo{slot = Slot}] -> mnesia:delete(Memos, {XName, Key}, write);
                _ -> ok  %% replaced since: its new slot is elsewhere
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
            rabbit_log:warning("x-fm-memos: cannot answer ~s: ~p:~p", [ReplyTo, Class, Reason])
    end,
    ok.

tables(Args) ->
    case rabbit_misc:table_lookup(Args, ?PERSISTENCE_ARG) of
        {_, <<"disk">>} -> {?DISK_MEMOS, ?DISK_EXPIRY};
        _ -> {?MEMOS, ?EXPIRY}
    end.

validate(#exchange{arguments = Args}) ->
    case rabbit_misc:table_lookup(Args, ?PERSISTENCE_ARG) of
        undefined -> ok;
        {longstr, P} when P =:= <<"memory">>; P =:= <<"disk">> -> ok;
        _ -> rabbit_misc:protocol_error(precondition_failed,
                                        "x-memo-persistence must be \"memory\" or \"disk\"", [])
    end.

validate_binding(_X, _B) -> ok.
create(_Tx, _X) -> ok.

delete(transaction, _X, _Bs) -> ok;
delete(none, #exchange{name = XName, arguments = Args}, _Bs) ->
    {Memos, Expiry} = tables(Args),
    mnesia:transaction(
      fun() ->
          [begin
               mnesia:delete(Memos, {XName, Key}, write),
               mnesia:delete(Expiry, Slot, write)
           end
           || #fm_memo_expiry{key = Slot, memo = Key}
                  <- mnesia:match_object(Expiry, #fm_memo_expiry{key = {XName, '_'}, _ = '_'},
                                         write)]
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
    rabbit_fm_tables:ensure(
      "x-fm-memos",
      [{?MEMOS, fm_memo, record_info(fields, fm_memo), set, ram_copies},
       {?EXPIRY, fm_memo_expiry, record_info(fields, fm_memo_expiry), ordered_set, ram_copies},
       {?DISK_MEMOS, fm_memo, record_info(fields, fm_memo), set, disc_copies},
       {?DISK_EXPIRY, fm_memo_expiry, record_info(fields, fm_memo_expiry), ordered_set,
        disc_copies}]).

disable_plugin() ->
    rabbit_registry:unregister(exchange, ?TYPE),
    ok.
