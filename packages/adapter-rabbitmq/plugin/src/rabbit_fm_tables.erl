%% The Mnesia tables of framework-m's exchange types, made idempotently: on the boot
%% step of a node, and by build.sh after it loaded new code into a running node.
-module(rabbit_fm_tables).

-export([ensure/2]).

%% Tables: [{Name, RecordName, Fields, set | ordered_set, ram_copies | disc_copies}].
ensure(What, Tables) ->
    [ensure_table(What, Table) || Table <- Tables],
    case mnesia:wait_for_tables([Name || {Name, _, _, _, _} <- Tables], 30000) of
        ok -> ok;
        Other -> rabbit_log:warning("~s tables not ready: ~p", [What, Other])
    end.

ensure_table(What, {Name, Record, Fields, Type, Copies}) ->
    case mnesia:create_table(Name, [{attributes, Fields}, {record_name, Record},
                                    {type, Type}, {Copies, [node()]}]) of
        {atomic, ok} -> ok;
        {aborted, {already_exists, Name}} ->
            case mnesia:add_table_copy(Name, node(), Copies) of
                {atomic, ok} -> ok;
                {aborted, {already_exists, Name, _Node}} -> ok;
                %% e.g. disc_copies on a RAM node: the table is used from the other nodes.
                {aborted, Reason} ->
                    rabbit_log:warning("~s: no local copy of ~p: ~p", [What, Name, Reason])
            end;
        {aborted, Reason} ->
            rabbit_log:warning("~s: cannot create ~p: ~p", [What, Name, Reason])
    end.
